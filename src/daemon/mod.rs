//! The daemon, `paddock serve`, and its edges: the long-running loop (the file-activity
//! watcher and the periodic sweep, `serve`), the HTTP/JSON API that orchestrators call
//! (`api`), the web dashboard on the same listeners (`dashboard`) and the Prometheus
//! metrics (`metrics`). Each edge calls the same `Paddock` operations the CLI calls; none
//! imports the CLI (tests/it/architecture.rs).

pub(crate) mod api;
pub(crate) mod dashboard;
mod metrics;
pub(crate) mod serve;
