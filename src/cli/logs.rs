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
    use std::io::{Seek, SeekFrom};
    let mut offset = 0u64;
    loop {
        // Copied through in chunks, never held whole: the job sets the log's size.
        if let Ok(mut file) = std::fs::File::open(path)
            && file.seek(SeekFrom::Start(offset)).is_ok()
        {
            let mut out = std::io::stdout().lock();
            if let Ok(copied) = std::io::copy(&mut file, &mut out) {
                offset += copied;
            }
            let _ = out.flush();
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
