//! The microVM runtime's errors (the type lives beside the runtime's own, which holds it),
//! how they become the runtime's, and the removal of a VM's host cgroup that reports one
//! (shared by the job and pool-slot paths).

use super::cgroup;
use crate::runtime::RuntimeError;
pub use crate::runtime::error::MicrovmError;

impl MicrovmError {
    /// The VM of `vm` does not run: what QEMU and the guest's console said last.
    pub fn not_running(vm: &super::vm::VmDir) -> MicrovmError {
        MicrovmError::NotRunning {
            console: super::exec::tail(&vm.console()),
            qemu_log: super::exec::tail(&vm.qemu_log()),
        }
    }
}

pub(super) fn runtime_error(error: MicrovmError) -> RuntimeError {
    match error {
        MicrovmError::Runtime(inner) => *inner,
        other => RuntimeError::Microvm(Box::new(other)),
    }
}

/// Removes the host cgroup of VM `name` (a job's or a pool slot's) whose processes were
/// just ended, killing what is left in it; an error when it still holds processes.
pub(super) async fn end_cgroup(
    cgroup: Result<cgroup::VmCgroup, MicrovmError>,
    name: &str,
) -> Result<(), RuntimeError> {
    let Ok(cgroup) = cgroup else {
        return Ok(());
    };
    if cgroup.kill_and_remove().await {
        Ok(())
    } else {
        Err(RuntimeError::Microvm(Box::new(MicrovmError::Start {
            message: format!("the host cgroup of VM `{name}` still holds processes"),
        })))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A VM found dead says why when QEMU said it (a signal and its sender), beside what
    /// the guest printed last: an empty console alone does not tell a kill from a crash.
    #[test]
    fn a_vm_not_running_reports_qemus_last_words_and_the_console() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let vm = super::super::vm::VmDir {
            dir: dir.path().to_path_buf(),
        };
        std::fs::write(
            vm.qemu_log(),
            "qemu-system-x86_64: terminating on signal 15 from pid 4242 (paddock)\n",
        )
        .expect("write");
        std::fs::write(vm.console(), "[    0.1] Linux version 6.1\n").expect("write");
        let said = MicrovmError::not_running(&vm).to_string();
        assert!(
            said.contains("terminating on signal 15 from pid 4242"),
            "{said}"
        );
        assert!(said.contains("Linux version 6.1"), "{said}");
        // However much the guest wrote, the error holds its last lines, each cut short.
        let flood = format!("{}\n", "x".repeat(1 << 20)).repeat(4);
        std::fs::write(vm.console(), flood + "the last line\n").expect("write");
        let said = MicrovmError::not_running(&vm).to_string();
        assert!(said.contains("the last line"), "{said}");
        assert!(said.len() < 8 << 10, "{} bytes", said.len());
    }
}
