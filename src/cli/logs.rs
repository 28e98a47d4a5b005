//! `paddock logs`: every exec's command, output and exit code, optionally followed.

use std::io::Write;

use clap::Args;

use super::exit;
use crate::Paddock;
use crate::error::{Error, Result};

#[derive(Debug, Args)]
pub struct LogsArgs {
    #[arg(value_parser = super::job_id)]
    job: String,
    /// Keep printing as new output arrives, until the job is removed or Ctrl-C.
    #[arg(long, short)]
    follow: bool,
}

pub async fn run(paddock: &Paddock, args: LogsArgs) -> Result<i32> {
    let path = paddock.output_log(&args.job)?;
    follow_log(paddock, &args.job, &path, args.follow).await?;
    Ok(exit::OK)
}

/// Prints the job's output log; with `follow`, keeps printing new output until the job is
/// removed.
async fn follow_log(
    paddock: &Paddock,
    job: &str,
    path: &std::path::Path,
    follow: bool,
) -> Result<(), Error> {
    use std::io::{Read, Seek, SeekFrom};
    let mut offset = 0u64;
    loop {
        if let Ok(mut file) = std::fs::File::open(path) {
            let mut text = Vec::new();
            if file.seek(SeekFrom::Start(offset)).is_ok() && file.read_to_end(&mut text).is_ok() {
                offset += text.len() as u64;
                let mut out = std::io::stdout().lock();
                let _ = out.write_all(&text).and_then(|()| out.flush());
            }
        }
        if !follow {
            return Ok(());
        }
        if paddock.load(job).is_err() {
            return Ok(());
        }
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    }
}
