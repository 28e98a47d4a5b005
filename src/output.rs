//! Live output of commands run in a job: which stream a chunk came from and where it goes.
//! At the bottom of the module graph, so runtimes, the sync and front ends share it.

/// Which stream a chunk of output came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamKind {
    Stdout,
    Stderr,
}

/// Receives output as it arrives (the terminal, an HTTP stream), besides the capped copy
/// kept for the result.
pub trait OutputSink: Send {
    fn write(&mut self, stream: StreamKind, bytes: &[u8]);

    /// The exec got its id (`x-...`), before any output: where its output stays readable.
    fn started(&mut self, _exec: &str) {}
}

/// A sink that drops everything (`--json`, where only the result is printed).
pub struct Discard;

impl OutputSink for Discard {
    fn write(&mut self, _: StreamKind, _: &[u8]) {}
}
