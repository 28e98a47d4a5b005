//! `paddock logs`: every exec's command, output and exit code, optionally followed. Read in
//! chunks (constant memory, whatever the log's size); on a terminal, made safe
//! (`text::Replay`) unless `--raw`.

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
    /// The output's own bytes even on a terminal (escape sequences included).
    #[arg(long)]
    raw: bool,
}

pub async fn run(paddock: &Paddock, args: LogsArgs) -> Result<i32> {
    use std::io::IsTerminal;
    let path = paddock.output_log(&args.job)?;
    let safe = !args.raw && std::io::stdout().is_terminal();
    follow_log(paddock, &args.job, &path, args.follow, safe).await?;
    Ok(exit::OK)
}

/// Prints the job's output log; with `follow`, keeps printing new output until the job is
/// removed.
async fn follow_log(
    paddock: &Paddock,
    job: &str,
    path: &std::path::Path,
    follow: bool,
    safe: bool,
) -> Result<(), Error> {
    let mut offset = 0u64;
    let mut replay = crate::text::Replay::default();
    loop {
        let from = offset;
        let path_owned = path.to_path_buf();
        let read = tokio::task::spawn_blocking(move || print_from(&path_owned, from, safe, replay))
            .await
            .expect("the log reader does not panic");
        let (printed, back) = read;
        offset += printed;
        replay = back;
        if !follow || paddock.load(job).is_err() {
            if safe {
                let mut out = std::io::stdout().lock();
                let _ = out.write_all(replay.finish().as_bytes());
            }
            return Ok(());
        }
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    }
}

/// Copies the log from `offset` to its current end in 64 KiB chunks; returns how many bytes
/// it printed. A closed pipe ends it as if the log ended.
fn print_from(
    path: &std::path::Path,
    offset: u64,
    safe: bool,
    mut replay: crate::text::Replay,
) -> (u64, crate::text::Replay) {
    use std::io::{Read, Seek, SeekFrom};
    let mut printed = 0;
    let Ok(mut file) = std::fs::File::open(path) else {
        return (0, replay);
    };
    if file.seek(SeekFrom::Start(offset)).is_err() {
        return (0, replay);
    }
    let mut out = std::io::stdout().lock();
    let mut buffer = vec![0; 64 << 10];
    loop {
        let read = match file.read(&mut buffer) {
            Ok(0) | Err(_) => break,
            Ok(read) => read,
        };
        printed += read as u64;
        let chunk = &buffer[..read];
        let written = if safe {
            out.write_all(replay.push(chunk).as_bytes())
        } else {
            out.write_all(chunk)
        };
        if written.is_err() {
            break;
        }
    }
    let _ = out.flush();
    (printed, replay)
}
