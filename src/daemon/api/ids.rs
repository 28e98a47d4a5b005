//! The `{id}` of a job route, parsed with the one id rule ([`JobId::parse`]) before a handler
//! runs: a name with `/`, `..`, a NUL or 300 bytes (`a%2F..%2Fb`, `a%2Fgit%2Fevil`) is a 400
//! with the API's error body and never reaches the engine, the store or a path.

use axum::extract::{FromRequestParts, RawPathParams};
use axum::http::request::Parts;

use super::ApiError;
use crate::error::Error;
use crate::job::JobId;

/// A route's `{id}`, a valid job id.
pub(crate) struct JobIdPath(pub JobId);

impl<S: Send + Sync> FromRequestParts<S> for JobIdPath {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let params = RawPathParams::from_request_parts(parts, state)
            .await
            .map_err(|rejection| ApiError::bad_request(rejection.body_text()))?;
        let raw = params
            .iter()
            .find_map(|(name, value)| (name == "id").then_some(value))
            .ok_or_else(|| ApiError::bad_request("the route has no job id"))?;
        parse(raw).map(JobIdPath)
    }
}

/// A job id from a request (a path, a query): a 400 `invalid_input` naming the rule.
pub(crate) fn parse(raw: &str) -> Result<JobId, ApiError> {
    JobId::parse(raw).map_err(|error| ApiError::from(Error::from(error)))
}
