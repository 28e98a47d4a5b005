//! Every request to the daemon goes through here: with a deadline, its failure turned into
//! a [`RuntimeError`] that names the action and the target, a missing thing told apart from
//! a failure where the caller expects one.

use std::future::Future;
use std::time::Duration;

use bollard::Docker;
use bollard::models::ContainerCreateBody;
use bollard::query_parameters::CreateContainerOptionsBuilder;

use super::API_TIMEOUT;
use crate::runtime::RuntimeError;

pub(super) fn is_not_found(error: &bollard::errors::Error) -> bool {
    matches!(
        error,
        bollard::errors::Error::DockerResponseServerError {
            status_code: 404,
            ..
        }
    )
}

pub(super) fn is_unreachable(error: &bollard::errors::Error) -> bool {
    use bollard::errors::Error as E;
    matches!(
        error,
        E::HyperResponseError { .. }
            | E::IOError { .. }
            | E::RequestTimeoutError
            | E::SocketNotFoundError(_)
    )
}

/// Awaits one daemon call with a deadline and turns its failure into a [`RuntimeError`] that
/// names the action and the target.
pub(super) async fn call<T>(
    action: &'static str,
    target: &str,
    deadline: Duration,
    future: impl Future<Output = Result<T, bollard::errors::Error>>,
) -> Result<T, RuntimeError> {
    match tokio::time::timeout(deadline, future).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(error)) if is_unreachable(&error) => Err(RuntimeError::DockerUnavailable {
            message: format!("{action} `{target}`: {error}"),
        }),
        Ok(Err(error)) => Err(RuntimeError::Docker {
            action,
            target: target.to_string(),
            message: error.to_string(),
        }),
        Err(_) => Err(RuntimeError::DockerTimeout {
            action,
            target: target.to_string(),
            after: deadline,
        }),
    }
}

/// [`call`] for lookups and removals: a thing the daemon does not know is `None`.
pub(super) async fn optional<T>(
    action: &'static str,
    target: &str,
    deadline: Duration,
    future: impl Future<Output = Result<T, bollard::errors::Error>>,
) -> Result<Option<T>, RuntimeError> {
    match tokio::time::timeout(deadline, future).await {
        Ok(Err(error)) if is_not_found(&error) => Ok(None),
        Ok(result) => call(action, target, deadline, std::future::ready(result))
            .await
            .map(Some),
        Err(_) => Err(RuntimeError::DockerTimeout {
            action,
            target: target.to_string(),
            after: deadline,
        }),
    }
}

/// Creates the container `name` from `body`; returns its id. A name that is taken (409)
/// is [`RuntimeError::NameInUse`].
pub(super) async fn create_named(
    daemon: &super::Daemon,
    docker: &Docker,
    name: &str,
    body: ContainerCreateBody,
) -> Result<String, RuntimeError> {
    check_no_host_binds(daemon, name, &body)?;
    let options = CreateContainerOptionsBuilder::new().name(name).build();
    let created = tokio::time::timeout(API_TIMEOUT, docker.create_container(Some(options), body));
    match created.await {
        Ok(Err(bollard::errors::Error::DockerResponseServerError {
            status_code: 409, ..
        })) => Err(RuntimeError::NameInUse {
            name: name.to_string(),
        }),
        Ok(result) => call(
            "create container",
            name,
            API_TIMEOUT,
            std::future::ready(result),
        )
        .await
        .map(|created| created.id),
        Err(_) => Err(RuntimeError::DockerTimeout {
            action: "create container",
            target: name.to_string(),
            after: API_TIMEOUT,
        }),
    }
}

/// Starts the container `name`.
pub(super) async fn start_named(docker: &Docker, name: &str) -> Result<(), RuntimeError> {
    call(
        "start container",
        name,
        API_TIMEOUT,
        docker.start_container(name, None),
    )
    .await
}

/// The test switch (`PADDOCK_TEST_FORBID_HOST_BINDS=1`): a container on a remote engine
/// with a bind mount of a host path is refused before it is made.
fn check_no_host_binds(
    daemon: &super::Daemon,
    name: &str,
    body: &bollard::models::ContainerCreateBody,
) -> Result<(), RuntimeError> {
    if !daemon.is_remote() || !crate::engines::forbid_host_binds() {
        return Ok(());
    }
    let host = body.host_config.as_ref();
    let binds = host
        .and_then(|h| h.binds.as_ref())
        .is_some_and(|b| !b.is_empty());
    let bind_mounts = host.and_then(|h| h.mounts.as_ref()).is_some_and(|m| {
        m.iter()
            .any(|m| m.typ == Some(bollard::models::MountTypeEnum::BIND))
    });
    if binds || bind_mounts {
        return Err(RuntimeError::Docker {
            action: "create container",
            target: name.to_string(),
            message: "a host path bind-mounted into a remote engine's container (PADDOCK_TEST_FORBID_HOST_BINDS)".into(),
        });
    }
    Ok(())
}
