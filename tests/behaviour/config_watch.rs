//! The watch of the configuration directory never goes blind, and reading it never stalls DNS
//! (docs/design.md, "Live configuration"): the directory deleted and recreated, renamed over
//! (`mv -T`) or mounted over is still followed; a restart-only change is counted as such, and
//! shown as pending while the directory holds it; a reload whose read hangs does not delay a
//! query. These use the real inotify, and wait for the state they expect with bounded loops.

use crate::support;

use std::io::Write;
use std::net::SocketAddr;
use std::os::unix::fs::{OpenOptionsExt, symlink};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use hickory_proto::op::ResponseCode;
use hickory_proto::rr::RecordType;
use support::scratch::Scratch;
use support::{Answer, FakeDns, Meshdns, eventually, free_port, query, rr, udp};

const MEMBER: &str = "member-0.mongo.db.svc.cluster.local.";

/// A peer cluster's DNS that knows [`MEMBER`] as `ip`.
async fn peer(ip: [u8; 4]) -> FakeDns {
    FakeDns::builder()
        .answer(MEMBER, RecordType::A, Answer::records([rr::a(MEMBER, ip)]))
        .start()
        .await
}

/// The address `member-0.mongo.db.cluster.<cluster>` resolves to through meshdns at `addr`.
async fn member_of(addr: SocketAddr, cluster: &str) -> Option<String> {
    let name = format!("member-0.mongo.db.cluster.{cluster}.");
    let reply = udp(addr, &query(&name, RecordType::A)).await;
    (reply.msg.response_code == ResponseCode::NoError)
        .then(|| reply.answer_lines().first().cloned())
        .flatten()
        .and_then(|line| line.rsplit(' ').next().map(str::to_string))
}

/// Whether cluster `cluster` comes to answer with `ip` within 10 s.
async fn answers(addr: SocketAddr, cluster: &str, ip: &str) -> bool {
    eventually(100, || async {
        member_of(addr, cluster).await.as_deref() == Some(ip)
    })
    .await
}

/// The cluster the meshdns of these tests runs in.
const LOCAL: (&str, &str) = ("MESHDNS_LOCAL_CLUSTER", "a");

/// `MESHDNS_CLUSTERS` naming the local cluster `a` ([`LOCAL`]) and each `(cluster, peer)`.
fn clusters(peers: &[(&str, &FakeDns)]) -> String {
    std::iter::once("a=".to_string())
        .chain(
            peers
                .iter()
                .map(|(name, fake)| format!("{name}={}", fake.addr)),
        )
        .collect::<Vec<_>>()
        .join("; ")
}

/// `scratch/name`, a directory holding `MESHDNS_CLUSTERS = clusters` (the scratch directory is
/// its parent, watched too).
fn config_dir(scratch: &Scratch, name: &str, clusters: &str) -> PathBuf {
    let dir = scratch.0.join(name);
    std::fs::create_dir_all(&dir).unwrap();
    write_clusters(&dir, clusters);
    dir
}

/// Three peers: b, c, and c moved elsewhere.
async fn peers() -> (FakeDns, FakeDns, FakeDns) {
    (
        peer([10, 2, 0, 1]).await,
        peer([10, 3, 0, 1]).await,
        peer([10, 3, 0, 2]).await,
    )
}

/// Writes `name` in `dir` at once, as the kubelet's swap does (a hidden file renamed over it):
/// a reload never reads it half written.
fn write(dir: &Path, name: &str, content: &str) {
    let hidden = dir.join(format!(".{name}.tmp"));
    std::fs::write(&hidden, content).unwrap();
    std::fs::rename(&hidden, dir.join(name)).unwrap();
}

fn write_clusters(dir: &Path, clusters: &str) {
    write(dir, "MESHDNS_CLUSTERS", clusters);
}

#[tokio::test]
async fn a_directory_deleted_and_recreated_is_watched_again() {
    let kube = FakeDns::builder().start().await;
    let (b, c, c_moved) = peers().await;
    let scratch = Scratch::new("watch-recreated");
    let dir = config_dir(&scratch, "conf", &clusters(&[("b", &b)]));
    let shown = dir.display().to_string();
    let meshdns = Meshdns::before(&kube, &[("MESHDNS_CONFIG_DIR", &shown), LOCAL]).await;
    assert!(answers(meshdns.addr, "b", "10.2.0.1").await);

    std::fs::remove_dir_all(&dir).unwrap();
    std::fs::create_dir(&dir).unwrap();
    write_clusters(&dir, &clusters(&[("b", &b), ("c", &c)]));
    assert!(
        answers(meshdns.addr, "c", "10.3.0.1").await,
        "the recreated directory is read"
    );
    // A later change in the new directory is seen: its watch was armed anew.
    write_clusters(&dir, &clusters(&[("b", &b), ("c", &c_moved)]));
    assert!(
        answers(meshdns.addr, "c", "10.3.0.2").await,
        "a later change in the recreated directory is applied"
    );
}

#[tokio::test]
async fn a_directory_renamed_over_with_mv_t_is_watched_again() {
    let kube = FakeDns::builder().start().await;
    let (b, c, c_moved) = peers().await;
    let scratch = Scratch::new("watch-renamed");
    // conf -> first; then a new symlink to second renamed over conf, the atomic swap of a
    // deployment tool (`ln -s second tmp && mv -T tmp conf`).
    let first = config_dir(&scratch, "first", &clusters(&[("b", &b)]));
    let conf = scratch.0.join("conf");
    symlink(&first, &conf).unwrap();
    let shown = conf.display().to_string();
    let meshdns = Meshdns::before(&kube, &[("MESHDNS_CONFIG_DIR", &shown), LOCAL]).await;
    assert!(answers(meshdns.addr, "b", "10.2.0.1").await);

    let second = config_dir(&scratch, "second", &clusters(&[("b", &b), ("c", &c)]));
    let tmp = scratch.0.join("conf.tmp");
    symlink(&second, &tmp).unwrap();
    run_ok(Command::new("mv").arg("-T").arg(&tmp).arg(&conf));
    assert!(
        answers(meshdns.addr, "c", "10.3.0.1").await,
        "the directory renamed over is read"
    );
    // The watch follows the directory that is there now, not the one renamed away.
    write_clusters(&second, &clusters(&[("b", &b), ("c", &c_moved)]));
    assert!(
        answers(meshdns.addr, "c", "10.3.0.2").await,
        "a later change in the new directory is applied"
    );
}

/// The directory and its parent gone: nothing left to watch an event in. The failure is
/// counted and retried, and the retry that succeeds reads what appeared meanwhile.
#[tokio::test]
async fn a_watch_that_cannot_be_armed_is_counted_and_retried() {
    let kube = FakeDns::builder().start().await;
    let (b, c, _) = peers().await;
    let scratch = Scratch::new("watch-retried");
    let dir = config_dir(&scratch, "conf", &clusters(&[("b", &b)]));
    let shown = dir.display().to_string();
    let meshdns = Meshdns::before(&kube, &[("MESHDNS_CONFIG_DIR", &shown), LOCAL]).await;
    assert!(answers(meshdns.addr, "b", "10.2.0.1").await);
    assert_eq!(
        meshdns
            .metric("meshdns_config_watch_errors_total", &[])
            .await,
        0.0
    );

    std::fs::remove_dir_all(&scratch.0).unwrap();
    assert!(
        eventually(100, || async {
            meshdns
                .metric("meshdns_config_watch_errors_total", &[])
                .await
                >= 2.0
        })
        .await,
        "the directory and its parent could not be watched"
    );
    assert_eq!(
        member_of(meshdns.addr, "b").await.as_deref(),
        Some("10.2.0.1"),
        "the running configuration stays"
    );
    // Back where no watch can see it: only the retry finds it.
    config_dir(&scratch, "conf", &clusters(&[("b", &b), ("c", &c)]));
    assert!(
        answers(meshdns.addr, "c", "10.3.0.1").await,
        "a retry re-armed the watch and read the directory"
    );
}

#[tokio::test]
async fn a_restart_only_change_counts_as_restart_required_and_moves_no_timestamp() {
    let kube = FakeDns::builder().start().await;
    let b = peer([10, 2, 0, 1]).await;
    let scratch = Scratch::new("watch-restart");
    let dir = config_dir(&scratch, "conf", &clusters(&[("b", &b)]));
    let shown = dir.display().to_string();
    let meshdns = Meshdns::before(&kube, &[("MESHDNS_CONFIG_DIR", &shown), LOCAL]).await;
    let started = meshdns
        .metric("meshdns_config_last_reload_success_timestamp_seconds", &[])
        .await;
    assert!(started > 0.0);

    write(&dir, "MESHDNS_THREADS", "4");
    assert!(
        eventually(100, || async {
            meshdns.config_reloads("restart_required").await == 1.0
        })
        .await
    );
    assert_eq!(meshdns.config_reloads("applied").await, 0.0);
    assert_eq!(
        meshdns
            .metric("meshdns_config_last_reload_success_timestamp_seconds", &[])
            .await,
        started,
        "nothing was applied"
    );
    // Back to the value in force (the default): logged, nothing more to restart for; a live
    // change with it is applied and counted as such.
    std::fs::remove_file(dir.join("MESHDNS_THREADS")).unwrap();
    write(&dir, "MESHDNS_TIMEOUT", "3s");
    assert!(
        eventually(100, || async {
            meshdns.config_reloads("applied").await == 1.0
        })
        .await
    );
    assert_eq!(meshdns.config_reloads("restart_required").await, 1.0);
    assert_eq!(meshdns.config_reloads("rejected").await, 0.0);
}

#[tokio::test]
async fn restart_pending_stays_while_the_directory_holds_a_restart_only_change_and_clears_on_revert()
 {
    let kube = FakeDns::builder().start().await;
    let b = peer([10, 2, 0, 1]).await;
    let scratch = Scratch::new("watch-pending");
    let dir = config_dir(&scratch, "conf", &clusters(&[("b", &b)]));
    let shown = dir.display().to_string();
    let meshdns = Meshdns::before(&kube, &[("MESHDNS_CONFIG_DIR", &shown), LOCAL]).await;
    let pending = || meshdns.metric("meshdns_config_restart_pending", &[]);
    assert_eq!(pending().await, 0.0);

    write(&dir, "MESHDNS_THREADS", "4");
    assert!(eventually(100, || async { pending().await == 1.0 }).await);
    // Later reloads (a live change applied) find the change still waiting: the gauge stays.
    write(&dir, "MESHDNS_TIMEOUT", "3s");
    assert!(
        eventually(100, || async {
            meshdns.config_reloads("applied").await == 1.0
        })
        .await
    );
    assert_eq!(pending().await, 1.0, "the restart-only change still waits");
    // Reverted to the value in force: nothing waits for a restart any more.
    std::fs::remove_file(dir.join("MESHDNS_THREADS")).unwrap();
    assert!(eventually(100, || async { pending().await == 0.0 }).await);
}

#[tokio::test]
async fn an_empty_file_is_rejected_naming_nothing_removed() {
    let kube = FakeDns::builder().start().await;
    let b = peer([10, 2, 0, 1]).await;
    let scratch = Scratch::new("watch-empty");
    let dir = config_dir(&scratch, "conf", &clusters(&[("b", &b)]));
    let shown = dir.display().to_string();
    let meshdns = Meshdns::before(&kube, &[("MESHDNS_CONFIG_DIR", &shown), LOCAL]).await;
    assert!(answers(meshdns.addr, "b", "10.2.0.1").await);
    // A template whose variable was unset: the running clusters stay.
    write_clusters(&dir, "\n");
    assert!(
        eventually(100, || async {
            meshdns.config_reloads("rejected").await == 1.0
        })
        .await
    );
    assert_eq!(
        member_of(meshdns.addr, "b").await.as_deref(),
        Some("10.2.0.1")
    );
    assert_eq!(meshdns.config_reloads("applied").await, 0.0);
}

/// meshdns on a runtime of one thread of its own (as with `MESHDNS_THREADS=1`), stopped when
/// dropped.
struct OneThread {
    addr: SocketAddr,
    admin: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl OneThread {
    fn start(vars: Vec<(String, String)>) -> Self {
        let (ready, started) = std::sync::mpsc::channel();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async move {
                let vars: Vec<(&str, &str)> =
                    vars.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
                let meshdns = Meshdns::start(&vars).await;
                ready.send((meshdns.addr, meshdns.admin)).unwrap();
                let _ = stopped.await;
            });
            runtime.shutdown_timeout(Duration::from_secs(1));
        });
        let (addr, admin) = started.recv().unwrap();
        OneThread {
            addr,
            admin,
            stop: Some(stop),
            thread: Some(thread),
        }
    }

    async fn config_reloads(&self, result: &str) -> f64 {
        let response = support::admin::get(self.admin, "/metrics").await;
        support::admin::Scrape::parse(&response.body)
            .value("meshdns_config_reloads_total", &[("result", result)])
    }
}

impl Drop for OneThread {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The write end of the FIFO at `path`, once a reader has opened it: a non-blocking open for
/// writing fails (ENXIO) until then.
async fn writer_once_read(path: &Path) -> Option<std::fs::File> {
    for _ in 0..100 {
        let opened = std::fs::OpenOptions::new()
            .write(true)
            .custom_flags(nix::libc::O_NONBLOCK)
            .open(path);
        if let Ok(file) = opened {
            return Some(file);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    None
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_whose_read_hangs_does_not_delay_a_query() {
    let kube = FakeDns::builder().start().await;
    let b = peer([10, 2, 0, 1]).await;
    let scratch = Scratch::new("watch-hung");
    let dir = config_dir(&scratch, "conf", &clusters(&[("b", &b)]));
    let meshdns = OneThread::start(vec![
        ("MESHDNS_UPSTREAMS".into(), kube.addr.to_string()),
        ("MESHDNS_CONFIG_DIR".into(), dir.display().to_string()),
        (LOCAL.0.into(), LOCAL.1.into()),
    ]);
    assert!(answers(meshdns.addr, "b", "10.2.0.1").await);

    // A file whose read blocks, as on a hung mount: a FIFO that no one writes yet.
    let fifo = dir.join("MESHDNS_TIMEOUT");
    run_ok(Command::new("mkfifo").arg(&fifo));
    let mut writer = writer_once_read(&fifo)
        .await
        .expect("the reload opens the file");
    // The reload now waits in read(); the one thread that answers queries must not.
    for _ in 0..5 {
        let asked = Instant::now();
        let answer = tokio::time::timeout(Duration::from_secs(1), member_of(meshdns.addr, "b"))
            .await
            .expect("answered while the reload hangs");
        assert_eq!(answer.as_deref(), Some("10.2.0.1"));
        assert!(asked.elapsed() < Duration::from_secs(1));
    }
    assert_eq!(meshdns.config_reloads("applied").await, 0.0);
    // The mount answers: the reload completes and is applied.
    writer.write_all(b"3s\n").unwrap();
    drop(writer);
    assert!(
        eventually(100, || async {
            meshdns.config_reloads("applied").await == 1.0
        })
        .await
    );
}

/// The meshdns binary in a mount namespace of its own (so that a mount can be put over its
/// configuration directory without touching the machine's), killed when dropped.
struct Unshared(Child);

impl Unshared {
    fn pid(&self) -> String {
        self.0.id().to_string()
    }
}

impl Drop for Unshared {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn run_ok(command: &mut Command) {
    let output = command.output();
    assert!(
        output.as_ref().is_ok_and(|o| o.status.success()),
        "{command:?}: {output:?}"
    );
}

/// A mount over the directory raises no inotify event: SIGHUP reads what is there now, and
/// re-arms the watch on it, so that later changes inside the mount are applied too.
#[tokio::test]
async fn sighup_after_a_mount_over_the_directory_reads_it_and_watches_the_mount() {
    let kube = FakeDns::builder().start().await;
    let (b, c, c_moved) = peers().await;
    let scratch = Scratch::new("watch-mount");
    let dir = config_dir(&scratch, "conf", &clusters(&[("b", &b)]));
    let mounted = config_dir(&scratch, "mounted", &clusters(&[("b", &b), ("c", &c)]));
    let listen: SocketAddr = ([127, 0, 0, 1], free_port()).into();
    let child = Command::new("unshare")
        .args(["--mount", "--propagation", "private", "--"])
        .arg(env!("CARGO_BIN_EXE_meshdns"))
        .env_clear()
        .env("MESHDNS_LISTEN", listen.to_string())
        .env("MESHDNS_UPSTREAMS", kube.addr.to_string())
        .env("MESHDNS_ADMIN_LISTEN", "")
        .env("MESHDNS_CACHE_SIZE", "0")
        .env("MESHDNS_CONFIG_DIR", &dir)
        .env(LOCAL.0, LOCAL.1)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("unshare (util-linux) runs meshdns");
    let meshdns = Unshared(child);
    let bound = eventually(100, || async {
        tokio::net::TcpStream::connect(listen).await.is_ok()
    })
    .await;
    assert!(bound, "the binary listens on {listen}");
    assert!(
        answers(listen, "b", "10.2.0.1").await,
        "the binary serves on {listen}"
    );

    run_ok(
        Command::new("nsenter")
            .args([
                "--target",
                &meshdns.pid(),
                "--mount",
                "--",
                "mount",
                "--bind",
            ])
            .arg(&mounted)
            .arg(&dir),
    );
    run_ok(Command::new("kill").args(["-HUP", &meshdns.pid()]));
    assert!(
        answers(listen, "c", "10.3.0.1").await,
        "SIGHUP reads the mounted directory"
    );
    write_clusters(&mounted, &clusters(&[("b", &b), ("c", &c_moved)]));
    assert!(
        answers(listen, "c", "10.3.0.2").await,
        "a change inside the mount is applied: SIGHUP re-armed the watch there"
    );
}
