//! Egress policy for jobs on the `allowlist` network: the allow-list ([`policy`]) and the
//! proxy that enforces it ([`proxy`], run as `paddock egress-proxy` in a sidecar container
//! on the job's internal network). The Docker wiring (networks, sidecar, environment) is in
//! `runtime/docker/egress.rs`; the unreachable route that keeps the job range on the host is
//! [`ranges`].

pub mod allow;
pub mod bridge;
pub mod ca;
pub mod intercept;
pub mod policy;
pub mod proxy;
pub mod ranges;
pub mod relay;
pub mod scrub;
pub mod secrets;
pub mod tls;
mod tunnel;
mod upstream;

pub use allow::AllowEntry;
pub use policy::EgressPolicy;
