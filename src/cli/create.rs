//! `paddock create`: a branch, a private git dir, a checkout and (with Docker) a container.

use clap::Args;

use super::exit;
use super::render::print_json;
use crate::error::Result;
use crate::ops::Operations;
use crate::wire::CreateRequest;

#[derive(Debug, Args)]
pub struct CreateArgs {
    #[command(flatten)]
    pub request: CreateRequest,
    #[arg(long)]
    pub json: bool,
}

pub async fn run(ops: &impl Operations, mut args: CreateArgs) -> Result<i32> {
    let tag = super::waiting::tag(args.json);
    args.request.waiter.clone_from(&tag);
    let (view, warning) =
        super::waiting::noting(ops, tag.as_deref(), None, ops.create(args.request)).await?;
    if let Some(warning) = &warning {
        tell!("warning: {warning}");
    }
    print_created(&view, args.json);
    Ok(exit::OK)
}

/// A create with an idempotency key, without a daemon: the same request under the same key
/// answers with the job the first one made (as the daemon's `POST /v1/jobs` would).
pub async fn run_keyed(paddock: &crate::Paddock, key: &str, args: CreateArgs) -> Result<i32> {
    use crate::idempotency::{Claim, IdempotencyStore, valid_key};
    if !valid_key(key) {
        tell!("error: --idempotency-key must be 1 to 255 visible ASCII characters");
        return Ok(exit::USAGE);
    }
    let store = IdempotencyStore::open(paddock.home())?;
    // The daemon's operation and body: one key, one job, with or without a daemon.
    let body = crate::client::create_body(args.request);
    let mut request: crate::wire::CreateRequest =
        serde_json::from_value(body.clone()).expect("a create body reads back");
    // The tag is not in the body (so not in what the key names).
    let tag = super::waiting::tag(args.json);
    request.waiter.clone_from(&tag);
    match store.claim(key, "POST /v1/jobs", body.to_string().as_bytes())? {
        Claim::Replay { answer, .. } => {
            let view: crate::wire::JobView =
                serde_json::from_value(answer).map_err(|e| crate::error::Error::Serve {
                    message: format!("the answer kept for key `{key}` is unreadable: {e}"),
                })?;
            print_created(&view, args.json);
            Ok(exit::OK)
        }
        Claim::InProgress { .. } => {
            tell!("error: a create with --idempotency-key `{key}` is still at work");
            Ok(exit::CONFLICT)
        }
        Claim::Mismatch { operation } => {
            tell!(
                "error: --idempotency-key `{key}` was used for another request ({operation}, or another body)"
            );
            Ok(exit::INVALID_INPUT)
        }
        Claim::Fresh(pending) => {
            let create = crate::ops::Operations::create(paddock, request);
            let (view, warning) =
                super::waiting::noting(paddock, tag.as_deref(), None, create).await?;
            if let Some(warning) = &warning {
                tell!("warning: {warning}");
            }
            pending.finish(
                201,
                None,
                serde_json::to_value(&view).expect("views serialize"),
            )?;
            print_created(&view, args.json);
            Ok(exit::OK)
        }
    }
}

fn print_created(view: &crate::wire::JobView, json: bool) {
    for run in view.setup.iter().filter(|run| !run.ok) {
        tell!(
            "warning: setup command `{}` failed ({}); the job was kept (`setup_optional`)",
            run.command,
            run.outcome()
        );
    }
    if json {
        print_json(view);
    } else {
        say!(
            "created job {} on branch {} at {}",
            view.id,
            view.branch,
            view.worktree.display()
        );
    }
}
