//! A same-run A/B of this build against another build of paddock
//! (`PADDOCK_BENCH_ONLY=ab PADDOCK_BENCH_AGAINST=PATH`, e.g. the release binary of an earlier
//! commit): the create and exec rows, both builds in one run, each pair interleaved with the
//! order alternated, each build with an install of its own on the same fixture repository.
//! The "baseline" column is the other build; a ratio above 1 means this build is slower.

use super::*;

/// How many pairs a row takes (creates are slower than execs, so fewer).
const CREATE_PAIRS: usize = 15;
const EXEC_PAIRS: usize = 31;

/// One side of the A/B: a build and its own install.
struct Side {
    program: PathBuf,
    home: TestHome,
    /// CPU time (user + system of the command and its children) of each timed create.
    cpu: std::cell::RefCell<Vec<f64>>,
}

impl Side {
    fn cmd(&self, args: &[&str]) -> Command {
        self.home.cmd_of(&self.program, args)
    }

    /// A new job of `runtime` (with the checkout kind `checkout`, else the one paddock
    /// picks): its id and how long the create took.
    fn new_job(
        &self,
        repo: &FixtureRepo,
        task: &str,
        runtime: &str,
        checkout: Option<&str>,
    ) -> (String, Duration) {
        let path = repo.path().display().to_string();
        let image = test_image();
        let mut args = vec![
            "create",
            "--repo",
            &path,
            "--task",
            task,
            "--runtime",
            runtime,
        ];
        if let Some(checkout) = checkout {
            args.extend(["--checkout", checkout]);
        }
        if runtime == "docker" {
            args.extend(["--image", &image]);
        }
        args.push("--json");
        let cpu = children_cpu();
        let (took, out) = timed(&mut self.cmd(&args));
        self.cpu.borrow_mut().push(ms(children_cpu() - cpu));
        let id = serde_json::from_str::<Value>(&out).unwrap()["id"]
            .as_str()
            .unwrap()
            .to_string();
        (id, took)
    }

    /// A create's time with the checkout kind `checkout`, its job removed afterwards
    /// (untimed).
    fn create(&self, repo: &FixtureRepo, task: &str, runtime: &str, checkout: &str) -> f64 {
        let (id, took) = self.new_job(repo, task, runtime, Some(checkout));
        run(&mut self.cmd(&["rm", &id]));
        ms(took)
    }
}

/// `pairs` samples of each side, the order alternated pair by pair.
fn paired(
    pairs: usize,
    mut ours: impl FnMut(usize) -> f64,
    mut theirs: impl FnMut(usize) -> f64,
) -> (Vec<f64>, Vec<f64>) {
    let (mut a, mut b) = (Vec::new(), Vec::new());
    for i in 0..pairs {
        if i % 2 == 0 {
            a.push(ours(i));
            b.push(theirs(i));
        } else {
            b.push(theirs(i));
            a.push(ours(i));
        }
    }
    (a, b)
}

fn row(name: String, ours: Vec<f64>, theirs: Vec<f64>, against: &Path) -> Row {
    let ratio = median(&ours) / median(&theirs);
    Row {
        name,
        note: format!(
            "this build vs {} in the same run, order alternated; {:.2}× at the median",
            against.display(),
            ratio
        ),
        paddock: ours,
        baseline: Some(theirs),
        unit: "ms",
        target: "≤ 1.05 × the other build".into(),
        met: ratio <= 1.05,
    }
}

/// The A/B rows: process and Docker creates, `exec -- true` and a committing exec.
pub(super) fn rows(against: &Path, repo: &FixtureRepo, label: &str, rows: &mut Vec<Row>) {
    let this = Side {
        program: PathBuf::from(env!("CARGO_BIN_EXE_paddock")),
        home: TestHome::new(),
        cpu: std::cell::RefCell::default(),
    };
    let other = Side {
        program: against.to_path_buf(),
        home: TestHome::new(),
        cpu: std::cell::RefCell::default(),
    };
    // A worktree checkout writes every file of the tree; an overlay checkout after the
    // first (which makes the shared pristine checkout) writes none.
    for checkout in ["worktree", "overlay"] {
        let (a, b) = paired(
            CREATE_PAIRS,
            |i| {
                this.create(
                    repo,
                    &format!("a-process-{checkout}-{i}"),
                    "process",
                    checkout,
                )
            },
            |i| {
                other.create(
                    repo,
                    &format!("b-process-{checkout}-{i}"),
                    "process",
                    checkout,
                )
            },
        );
        let mut done = row(
            format!("A/B: process runtime create, {checkout} ({label})"),
            a,
            b,
            against,
        );
        // CPU time is far steadier than wall time on a shared disk: it shows whether a build
        // does more work or only rides the noise.
        let (ours, theirs) = (this.cpu.take(), other.cpu.take());
        done.note.push_str(&format!(
            "; CPU time median {:.0} vs {:.0} ms = {:.2}×",
            median(&ours),
            median(&theirs),
            median(&ours) / median(&theirs)
        ));
        rows.push(done);
    }
    if !docker_ok() {
        eprintln!("no Docker daemon or agent image: the Docker A/B rows are left out");
        return;
    }
    docker_rows(&this, &other, against, repo, label, rows);
}

/// The Docker rows of the A/B: creates to ready, `exec -- true` and a committing exec.
fn docker_rows(
    this: &Side,
    other: &Side,
    against: &Path,
    repo: &FixtureRepo,
    label: &str,
    rows: &mut Vec<Row>,
) {
    for checkout in ["worktree", "overlay"] {
        let (a, b) = paired(
            CREATE_PAIRS,
            |i| {
                this.create(
                    repo,
                    &format!("a-docker-{checkout}-{i}"),
                    "docker",
                    checkout,
                )
            },
            |i| {
                other.create(
                    repo,
                    &format!("b-docker-{checkout}-{i}"),
                    "docker",
                    checkout,
                )
            },
        );
        rows.push(row(
            format!("A/B: cold job ready, Docker, {checkout} ({label})"),
            a,
            b,
            against,
        ));
    }
    let job = |side: &Side, task: &str| {
        let (id, _) = side.new_job(repo, task, "docker", None);
        // One untimed exec first: the container's first execs page in sh and git.
        run(&mut side.cmd(&["exec", &id, "--", "git", "status", "--short"]));
        id
    };
    let (ours, theirs) = (job(this, "a-exec"), job(other, "b-exec"));
    let exec = |side: &Side, id: &str, script: &str| {
        ms(timed(&mut side.cmd(&["exec", id, "--", "sh", "-c", script])).0)
    };
    let (a, b) = paired(
        EXEC_PAIRS,
        |_| exec(this, &ours, "true"),
        |_| exec(other, &theirs, "true"),
    );
    rows.push(row(
        format!("A/B: exec true, Docker ({label})"),
        a,
        b,
        against,
    ));
    let commit =
        |i: usize| format!("echo {i} >> f.txt && git add f.txt && git commit -q -m 'f {i}'");
    let (a, b) = paired(
        EXEC_PAIRS,
        |i| exec(this, &ours, &commit(i)),
        |i| exec(other, &theirs, &commit(i)),
    );
    rows.push(row(
        format!("A/B: exec with a commit, Docker ({label})"),
        a,
        b,
        against,
    ));
    run(&mut this.cmd(&["rm", &ours]));
    run(&mut other.cmd(&["rm", &theirs]));
}
