//! The framed protocol between paddock on the host and its guest agent inside a microVM,
//! carried by one virtio-serial port (a QEMU chardev socket on the host side).
//!
//! A frame is a 4-byte big-endian length and that many bytes of JSON. Every message about a
//! command carries the exec's `id`: virtio-serial keeps bytes the guest wrote while no host
//! client was connected, so a new connection may first read the tail of an earlier exec,
//! which the host skips by its id. Output travels as base64 so any bytes survive JSON.
//! Frames are capped ([`MAX_FRAME`]) so a hostile guest cannot make the host allocate
//! without bound.

use std::io::{Read, Write};

use base64::Engine as _;
use serde::{Deserialize, Serialize};

/// The largest frame either side accepts (output chunks are far smaller).
pub const MAX_FRAME: u32 = 4 << 20;

/// What the host asks of the guest agent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ToGuest {
    /// Answer with [`FromGuest::Pong`] (readiness after boot, liveness).
    Ping { id: u64 },
    /// Run `argv` as `uid:gid` in the job's cgroup, in its own process group.
    Exec {
        id: u64,
        argv: Vec<String>,
        env: Vec<(String, String)>,
        workdir: String,
        uid: u32,
        gid: u32,
        /// Whether [`ToGuest::Stdin`] frames feed the command (else its stdin is empty).
        #[serde(default)]
        stdin: bool,
        /// Whether the command keeps the capabilities of its uid (only the test switch's
        /// root: `guest_root_for_tests`); else the bounding set is emptied first.
        #[serde(default)]
        keep_caps: bool,
    },
    /// Bytes for exec `id`'s stdin (base64); empty `data` closes it.
    Stdin { id: u64, data: String },
    /// Send `signal` to the process group of exec `id` (stop, timeout).
    Signal { id: u64, signal: i32 },
    /// Kill every process of the job (its cgroup), leaving the VM up for a last sync.
    KillAll,
    /// Power the VM off (the stop's polite first step).
    Shutdown,
    /// A pool slot was claimed: mount the virtiofs share `tag` and bind its parts where the
    /// job's files belong; answered by [`FromGuest::Exit`] (0) or [`FromGuest::Failed`].
    Mount {
        id: u64,
        tag: String,
        mounts: Vec<GuestMount>,
    },
    /// A piece (base64) of a longer message's JSON, for the container transport, whose
    /// lines stay below [`MAX_LINE`]: the reader joins the pieces of `id` in order and
    /// handles the whole message at the `last` one ([`Parts`]). An exec's line (its sync
    /// snippet, its environment) is often over the cap. Frames have no such cap: the
    /// microVM's guest agent is never sent one.
    Part { id: u64, data: String, last: bool },
}

/// One part of a claimed pool slot's share: `source` (relative to the share's root) bound
/// at `target` in the guest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GuestMount {
    pub source: String,
    pub target: String,
    pub read_only: bool,
}

/// What the guest agent reports.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum FromGuest {
    Pong {
        id: u64,
        /// The guest kernel's release (`uname -r`).
        kernel: String,
    },
    Stdout {
        id: u64,
        data: String,
    },
    Stderr {
        id: u64,
        data: String,
    },
    /// The command ended: its exit code (128+n for signal n, as a shell reports it) and
    /// whether the job cgroup's OOM-kill counter rose while it ran.
    Exit {
        id: u64,
        code: i64,
        oom_killed: bool,
    },
    /// The command started (sent by the container's exec server, whose input may carry
    /// another host's bytes: a host that sees no `Started` knows its command never ran).
    Started {
        id: u64,
    },
    /// The command could not start.
    Failed {
        id: u64,
        message: String,
    },
}

impl FromGuest {
    /// A stdout or stderr frame for `bytes`.
    pub fn output(id: u64, stderr: bool, bytes: &[u8]) -> FromGuest {
        let data = base64::engine::general_purpose::STANDARD.encode(bytes);
        if stderr {
            FromGuest::Stderr { id, data }
        } else {
            FromGuest::Stdout { id, data }
        }
    }
}

/// The bytes of an output frame's `data` (empty when it is not base64: a guest bug).
pub fn decode(data: &str) -> Vec<u8> {
    base64::engine::general_purpose::STANDARD
        .decode(data)
        .unwrap_or_default()
}

#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    #[error("the channel closed")]
    Closed,
    #[error("a frame of {len} bytes is over the {MAX_FRAME}-byte cap")]
    TooLong { len: u32 },
    #[error("a frame is not valid JSON: {0}")]
    Json(#[from] serde_json::Error),
    #[error("reading or writing the channel: {0}")]
    Io(#[from] std::io::Error),
}

/// The frame for `message`: length, then JSON.
pub fn encode<T: Serialize>(message: &T) -> Vec<u8> {
    let body = serde_json::to_vec(message).expect("protocol messages serialize");
    let mut frame = Vec::with_capacity(body.len() + 4);
    let len = u32::try_from(body.len()).expect("a protocol message is far below 4 GiB");
    frame.extend_from_slice(&len.to_be_bytes());
    frame.extend_from_slice(&body);
    frame
}

/// Writes one frame (blocking; the guest side).
pub fn write_frame<T: Serialize>(out: &mut impl Write, message: &T) -> Result<(), FrameError> {
    out.write_all(&encode(message))?;
    out.flush()?;
    Ok(())
}

/// Reads one frame (blocking; the guest side). End of input before a frame starts is
/// [`FrameError::Closed`].
pub fn read_frame<T: for<'de> Deserialize<'de>>(input: &mut impl Read) -> Result<T, FrameError> {
    let mut len = [0u8; 4];
    match input.read_exact(&mut len) {
        Ok(()) => {}
        Err(error) if error.kind() == std::io::ErrorKind::UnexpectedEof => {
            return Err(FrameError::Closed);
        }
        Err(error) => return Err(error.into()),
    }
    let body = read_body(u32::from_be_bytes(len), input)?;
    Ok(serde_json::from_slice(&body)?)
}

fn read_body(len: u32, input: &mut impl Read) -> Result<Vec<u8>, FrameError> {
    if len > MAX_FRAME {
        return Err(FrameError::TooLong { len });
    }
    let mut body = vec![0u8; len as usize];
    input.read_exact(&mut body)?;
    Ok(body)
}

/// Reads one frame from an async stream (the host side).
pub async fn read_frame_async<T: for<'de> Deserialize<'de>>(
    input: &mut (impl tokio::io::AsyncRead + Unpin),
) -> Result<T, FrameError> {
    use tokio::io::AsyncReadExt as _;
    let mut len = [0u8; 4];
    match input.read_exact(&mut len).await {
        Ok(_) => {}
        Err(error) if error.kind() == std::io::ErrorKind::UnexpectedEof => {
            return Err(FrameError::Closed);
        }
        Err(error) => return Err(error.into()),
    }
    let len = u32::from_be_bytes(len);
    if len > MAX_FRAME {
        return Err(FrameError::TooLong { len });
    }
    let mut body = vec![0u8; len as usize];
    input.read_exact(&mut body).await?;
    Ok(serde_json::from_slice(&body)?)
}

/// The largest line the container transport carries either way: below `PIPE_BUF`, so one
/// host's write reaches the server's input whole even when another host writes too.
pub const MAX_LINE: usize = 4000;

/// `message` as one line of JSON (the container transport: its reader may join the stream
/// mid-line, and a line is where it finds the next message).
pub fn encode_line<T: Serialize>(message: &T) -> Vec<u8> {
    let mut line = serde_json::to_vec(message).expect("protocol messages serialize");
    line.push(b'\n');
    line
}

/// How many bytes of a message one [`ToGuest::Part`] carries: its base64 and the line's
/// framing stay below [`MAX_LINE`].
const PART_BYTES: usize = 2048;

/// `message` as the lines that carry it: one line when it fits in [`MAX_LINE`], else its
/// JSON in [`ToGuest::Part`] lines under `id` (the last one marked).
pub fn encode_lines(message: &ToGuest, id: u64) -> Vec<Vec<u8>> {
    let line = encode_line(message);
    if line.len() <= MAX_LINE {
        return vec![line];
    }
    let json = &line[..line.len() - 1];
    let count = json.len().div_ceil(PART_BYTES);
    json.chunks(PART_BYTES)
        .enumerate()
        .map(|(i, chunk)| {
            encode_line(&ToGuest::Part {
                id,
                data: base64::engine::general_purpose::STANDARD.encode(chunk),
                last: i + 1 == count,
            })
        })
        .collect()
}

/// A reader's messages in pieces ([`ToGuest::Part`]), joined by id. Bounded: a message
/// over [`Parts::MAX_MESSAGE`] bytes is dropped, and at most [`Parts::MAX_PENDING`] are
/// joined at once (a new one past that drops them all: a host that stopped mid-message
/// leaves nothing behind for ever).
#[derive(Debug, Default)]
pub struct Parts {
    pending: std::collections::HashMap<u64, Vec<u8>>,
}

impl Parts {
    pub const MAX_MESSAGE: usize = 4 << 20;
    pub const MAX_PENDING: usize = 64;

    /// Adds a piece; the whole message once its last piece is in (never another `Part`).
    pub fn push(&mut self, id: u64, data: &str, last: bool) -> Option<ToGuest> {
        if !self.pending.contains_key(&id) && self.pending.len() >= Self::MAX_PENDING {
            self.pending.clear();
        }
        let joined = self.pending.entry(id).or_default();
        joined.extend(decode(data));
        if joined.len() > Self::MAX_MESSAGE {
            self.pending.remove(&id);
            return None;
        }
        if !last {
            return None;
        }
        let whole = self.pending.remove(&id)?;
        match serde_json::from_slice(&whole) {
            Ok(ToGuest::Part { .. }) | Err(_) => None,
            Ok(message) => Some(message),
        }
    }
}

/// Splits complete lines off the front of `buffer` and parses each; a line that is not a
/// message (the tail of one another reader was sent, or junk) is skipped, and a buffer
/// that grows past `cap` without a newline is dropped.
pub fn take_lines<T: for<'de> Deserialize<'de>>(buffer: &mut Vec<u8>, cap: usize) -> Vec<T> {
    let mut out = Vec::new();
    while let Some(end) = buffer.iter().position(|b| *b == b'\n') {
        let line: Vec<u8> = buffer.drain(..=end).collect();
        if let Ok(message) = serde_json::from_slice(&line[..line.len() - 1]) {
            out.push(message);
        }
    }
    if buffer.len() > cap {
        buffer.clear();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_message_goes_in_parts_below_the_line_cap_and_is_joined_whole() {
        let exec = ToGuest::Exec {
            id: 9,
            argv: vec!["sh".into(), "-c".into(), "x\"é\n".repeat(3000)],
            env: vec![("A".into(), "b".repeat(5000))],
            workdir: "/workspace".into(),
            uid: 1000,
            gid: 1000,
            stdin: false,
            keep_caps: false,
        };
        let lines = encode_lines(&exec, 9);
        assert!(lines.len() > 5, "{}", lines.len());
        assert!(
            lines
                .iter()
                .all(|l| l.len() <= MAX_LINE && l.ends_with(b"\n"))
        );
        let mut wire: Vec<u8> = lines.concat();
        let mut parts = Parts::default();
        let mut whole = Vec::new();
        for message in take_lines::<ToGuest>(&mut wire, 1 << 20) {
            let ToGuest::Part { id, data, last } = message else {
                panic!("only parts: {message:?}");
            };
            whole.extend(parts.push(id, &data, last));
        }
        assert_eq!(whole, vec![exec]);
        assert!(parts.pending.is_empty());
        // A short one is one plain line.
        let ping = ToGuest::Ping { id: 1 };
        assert_eq!(encode_lines(&ping, 1), vec![encode_line(&ping)]);
    }

    #[test]
    fn parts_are_bounded_and_never_nest() {
        let mut parts = Parts::default();
        let b64 = |bytes: &[u8]| base64::engine::general_purpose::STANDARD.encode(bytes);
        // A part that joins into another part is dropped.
        let nested = serde_json::to_vec(&ToGuest::Part {
            id: 1,
            data: String::new(),
            last: true,
        })
        .expect("serializes");
        assert_eq!(parts.push(1, &b64(&nested), true), None);
        // Abandoned messages do not pile up past the bound.
        for id in 0..(Parts::MAX_PENDING as u64 * 3) {
            assert_eq!(parts.push(id, &b64(b"{"), false), None);
        }
        assert!(parts.pending.len() <= Parts::MAX_PENDING);
        // One over the size cap is dropped.
        let big = b64(&vec![b' '; Parts::MAX_MESSAGE + 1]);
        assert_eq!(parts.push(7, &big, false), None);
        assert!(!parts.pending.contains_key(&7));
    }

    #[test]
    fn lines_resync_after_a_cut_and_skip_junk() {
        let mut wire = b"d\":\"aGk=\"}\n".to_vec();
        wire.extend(encode_line(&FromGuest::Started { id: 4 }));
        wire.extend(b"not json\n");
        let exit = encode_line(&FromGuest::Exit {
            id: 4,
            code: 0,
            oom_killed: false,
        });
        let (first, rest) = exit.split_at(5);
        wire.extend(first);
        let got: Vec<FromGuest> = take_lines(&mut wire, 1 << 20);
        assert_eq!(got, vec![FromGuest::Started { id: 4 }]);
        wire.extend(rest);
        let got: Vec<FromGuest> = take_lines(&mut wire, 1 << 20);
        assert_eq!(
            got,
            vec![FromGuest::Exit {
                id: 4,
                code: 0,
                oom_killed: false
            }]
        );
        assert!(wire.is_empty());
        let mut endless = vec![b'x'; 100];
        assert!(take_lines::<FromGuest>(&mut endless, 50).is_empty());
        assert!(endless.is_empty(), "a line over the cap is dropped");
    }

    #[test]
    fn frames_round_trip_in_order() {
        let mut wire = Vec::new();
        let exec = ToGuest::Exec {
            id: 7,
            argv: vec!["sh".into(), "-c".into(), "echo hi".into()],
            env: vec![("A".into(), "b c".into())],
            workdir: "/workspace".into(),
            uid: 1000,
            gid: 1000,
            stdin: false,
            keep_caps: false,
        };
        write_frame(&mut wire, &exec).unwrap();
        write_frame(&mut wire, &ToGuest::Signal { id: 7, signal: 15 }).unwrap();
        let mut input = wire.as_slice();
        assert_eq!(read_frame::<ToGuest>(&mut input).unwrap(), exec);
        assert_eq!(
            read_frame::<ToGuest>(&mut input).unwrap(),
            ToGuest::Signal { id: 7, signal: 15 }
        );
        assert!(matches!(
            read_frame::<ToGuest>(&mut input),
            Err(FrameError::Closed)
        ));
    }

    #[test]
    fn output_keeps_bytes_that_are_not_text() {
        let frame = FromGuest::output(3, true, b"ok \xff\x00");
        let FromGuest::Stderr { id, data } = &frame else {
            panic!("{frame:?}")
        };
        assert_eq!(*id, 3);
        assert_eq!(decode(data), b"ok \xff\x00");
    }

    #[test]
    fn an_oversized_frame_is_refused_before_allocating() {
        let mut wire = (MAX_FRAME + 1).to_be_bytes().to_vec();
        wire.extend_from_slice(b"{}");
        let error = read_frame::<FromGuest>(&mut wire.as_slice()).unwrap_err();
        assert!(matches!(error, FrameError::TooLong { .. }), "{error}");
    }

    #[tokio::test]
    async fn the_async_reader_reads_what_the_blocking_writer_wrote() {
        let exit = FromGuest::Exit {
            id: 1,
            code: 137,
            oom_killed: true,
        };
        let wire = encode(&exit);
        let got: FromGuest = read_frame_async(&mut wire.as_slice()).await.unwrap();
        assert_eq!(got, exit);
        let cut = &wire[..wire.len() - 1];
        assert!(read_frame_async::<FromGuest>(&mut &cut[..]).await.is_err());
    }
}
