//! What a user would use today (sshfs) against a served store's remote mount, over TCP
//! between two network namespaces on this host (RIMFS compares against NFS; this kernel has
//! none): `bench remote --sshfs`.
//!
//! The server side runs in a namespace of its own behind a veth pair: `switchyard serve` on a
//! store in `/dev/shm`, and `sshd` exporting a directory of `/dev/shm`, so both back ends are
//! memory and the network path is what differs. The client side mounts both (`sshfs`, and
//! `switchyard mount --remote` with UCX restricted to TCP on the veth) and runs the same fio
//! jobs on each, with `O_DIRECT` so no page cache answers for the network, in rotated rounds.
//! CPU is counted per process tree from `/proc`: the serving side's (`serve`; `sshd` and its
//! sftp children) and the client side's (the mount process; `sshfs` and its `ssh`).

use std::io::BufRead;
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use serde::Serialize;

/// A network namespace with a veth pair to this one, removed (with the pair) when dropped.
pub struct Namespace {
    /// Its name (`ip netns`).
    pub name: String,
    /// The address of its end of the pair.
    pub inside: String,
    /// The veth end in this namespace.
    pub here: String,
    /// The veth end in the new namespace.
    pub there: String,
}

impl Namespace {
    /// Makes a namespace named for `tag` and this process, with addresses 10.77.N.1 here and
    /// 10.77.N.2 inside, both ends and the inside loopback up. Needs root.
    pub fn create(tag: &str) -> anyhow::Result<Namespace> {
        let pid = std::process::id();
        let name = format!("sy{tag}{pid}");
        let (here, there) = (format!("sy{tag}a{pid}"), format!("sy{tag}b{pid}"));
        let net = format!("10.77.{}", pid % 250);
        let ip = |args: &[&str]| -> anyhow::Result<()> {
            let st = Command::new("ip")
                .args(args)
                .status()
                .context("running ip")?;
            anyhow::ensure!(st.success(), "ip {args:?} failed");
            Ok(())
        };
        ip(&["netns", "add", &name])?;
        let ns = Namespace {
            name: name.clone(),
            inside: format!("{net}.2"),
            here: here.clone(),
            there: there.clone(),
        };
        ip(&["link", "add", &here, "type", "veth", "peer", "name", &there])?;
        ip(&["link", "set", &there, "netns", &name])?;
        ip(&["addr", "add", &format!("{net}.1/24"), "dev", &here])?;
        ip(&["link", "set", &here, "up"])?;
        let inside = |args: &[&str]| {
            let mut a = vec!["netns", "exec", &name, "ip"];
            a.extend_from_slice(args);
            ip(&a)
        };
        inside(&["addr", "add", &format!("{net}.2/24"), "dev", &there])?;
        inside(&["link", "set", &there, "up"])?;
        inside(&["link", "set", "lo", "up"])?;
        Ok(ns)
    }

    /// `program` to be run inside the namespace.
    pub fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.name]).arg(program);
        c
    }
}

impl Drop for Namespace {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .status();
    }
}

/// A child process killed (and its mount, if any, detached) when dropped.
struct Proc {
    child: Child,
    mount: Option<PathBuf>,
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Some(dir) = &self.mount {
            let _ = Command::new("fusermount3").arg("-u").arg(dir).status();
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// CPU time (user and system) of process `root` and every live descendant.
fn tree_cpu(root: u32) -> Duration {
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    let mut procs = Vec::new(); // (pid, ppid, ticks)
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
            continue;
        };
        // The fields after the command (which may hold spaces) start after its last ')'.
        let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else {
            continue;
        };
        let f: Vec<&str> = rest.split_whitespace().collect();
        let num = |i: usize| f.get(i).and_then(|x| x.parse::<u64>().ok()).unwrap_or(0);
        procs.push((pid, num(1) as u32, num(11) + num(12)));
    }
    let mut inside = vec![root];
    let mut grew = true;
    while grew {
        grew = false;
        for &(pid, ppid, _) in &procs {
            if inside.contains(&ppid) && !inside.contains(&pid) {
                inside.push(pid);
                grew = true;
            }
        }
    }
    let ticks: u64 = procs
        .iter()
        .filter(|p| inside.contains(&p.0))
        .map(|p| p.2)
        .sum();
    Duration::from_nanos(ticks * 1_000_000_000 / hz)
}

/// The first line `child` prints; the rest of its output is read and dropped (a closed pipe
/// would end it at its next line).
fn first_line(child: &mut Child) -> anyhow::Result<String> {
    let mut out = std::io::BufReader::new(child.stdout.take().context("no output pipe")?);
    let mut line = String::new();
    out.read_line(&mut line)?;
    std::thread::spawn(move || std::io::copy(&mut out, &mut std::io::sink()));
    Ok(line)
}

fn mounted(dir: &Path) -> bool {
    let dir = dir.to_string_lossy();
    std::fs::read_to_string("/proc/self/mounts")
        .unwrap_or_default()
        .lines()
        .any(|l| l.split(' ').nth(1) == Some(&*dir))
}

fn wait_for(what: &str, mut ready: impl FnMut() -> bool) -> anyhow::Result<()> {
    let t0 = Instant::now();
    while !ready() {
        if t0.elapsed() > Duration::from_secs(20) {
            bail!("{what} did not come up in 20 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(())
}

fn run(c: &mut Command) -> anyhow::Result<()> {
    let out = c.output().with_context(|| format!("running {c:?}"))?;
    anyhow::ensure!(
        out.status.success(),
        "{c:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}

/// The two systems compared.
const SYSTEMS: [&str; 2] = ["sshfs", "switchyard"];

/// One fio job, as both systems run it.
struct Job {
    name: &'static str,
    rw: &'static str,
    bs: &'static str,
    /// Run for a fixed time (random reads) rather than over the whole file.
    timed: bool,
}

const JOBS: [Job; 3] = [
    Job {
        name: "write 1 MiB",
        rw: "write",
        bs: "1m",
        timed: false,
    },
    Job {
        name: "read 1 MiB",
        rw: "read",
        bs: "1m",
        timed: false,
    },
    Job {
        name: "randread 4 KiB",
        rw: "randread",
        bs: "4k",
        timed: true,
    },
];

/// One job's figures on one system.
#[derive(Serialize, Clone)]
pub(super) struct Figure {
    job: &'static str,
    system: &'static str,
    mib_per_s: f64,
    /// Median over rounds of this ÷ sshfs in the same round.
    vs_sshfs: f64,
    server_cpu_s_per_gib: f64,
    client_cpu_s_per_gib: f64,
}

/// The processes of one side of the comparison: (server root pid, client root pid).
type Pids = [(u32, u32); 2];

/// Runs fio's `job` on `dir`; returns (bytes per second, bytes moved).
fn fio(dir: &Path, job: &Job, size: &str) -> anyhow::Result<(f64, f64)> {
    let mut c = Command::new("fio");
    c.args([
        "--name=bench",
        &format!("--directory={}", dir.display()),
        "--filename=bench.dat",
        &format!("--size={size}"),
        "--direct=1",
        "--ioengine=psync",
        &format!("--rw={}", job.rw),
        &format!("--bs={}", job.bs),
        "--output-format=json",
    ]);
    if job.timed {
        c.args(["--runtime=3", "--time_based"]);
    }
    let out = c.output().context("running fio")?;
    let text = String::from_utf8_lossy(&out.stdout);
    anyhow::ensure!(
        out.status.success(),
        "fio {} on {}: {text}{}",
        job.name,
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_str(&text[text.find('{').unwrap_or(0)..])?;
    let side = if job.rw.contains("read") {
        "read"
    } else {
        "write"
    };
    let j = &v["jobs"][0][side];
    Ok((
        j["bw_bytes"].as_f64().unwrap_or(0.0),
        j["io_bytes"].as_f64().unwrap_or(0.0),
    ))
}

/// Runs the comparison: `rounds` rotated rounds of every job on both systems.
pub(super) fn compare(rounds: usize, quick: bool, json: bool) -> anyhow::Result<()> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        bail!("--sshfs makes a network namespace: run it as root");
    }
    for tool in [
        "sshfs",
        "fio",
        "ssh-keygen",
        "/usr/sbin/sshd",
        "fusermount3",
    ] {
        let found = Command::new("sh")
            .args(["-c", &format!("command -v {tool}")])
            .stdout(Stdio::null())
            .status()?
            .success();
        if !found {
            bail!("--sshfs needs {tool} (apt-get install openssh-server sshfs fio fuse3)");
        }
    }
    let tmp = tempfile::Builder::new()
        .prefix("switchyard-bench-net")
        .tempdir_in("/dev/shm")
        .context("a scratch directory in /dev/shm")?;
    let t = tmp.path();
    let ns = Namespace::create("bn")?;
    let exe = crate::product::program()?;
    let size = if quick { "128M" } else { "512M" };
    // The served store.
    let store = t.join("s.store");
    run(Command::new(&exe)
        .args(["mkfs", "--size", "1G", "--store"])
        .arg(&store))?;
    let listen = format!("{}:7070", ns.inside);
    let mut serve = ns.command(&exe);
    serve
        .args(["serve", "--listen", &listen, "--store"])
        .arg(&store)
        .env("UCX_TLS", "tcp")
        .env("UCX_NET_DEVICES", &ns.there)
        .stdout(Stdio::piped());
    let mut serve = Proc {
        child: serve.spawn().context("starting serve")?,
        mount: None,
    };
    let first = first_line(&mut serve.child)?;
    anyhow::ensure!(first.starts_with("serving"), "serve said {first:?}");
    // sshd, exporting a directory of memory.
    let sshd = start_sshd(&ns, t)?;
    let (m_sshfs, m_sy) = (t.join("m-sshfs"), t.join("m-switchyard"));
    let (sshfs, mount, said) = mount_both(&ns, t, &exe, &listen, [&m_sshfs, &m_sy])?;
    let pids: Pids = [
        (sshd.child.id(), sshfs.child.id()),
        (serve.child.id(), mount.child.id()),
    ];
    let dirs = [&m_sshfs, &m_sy];
    if !json {
        println!(
            "bench remote --sshfs: over TCP between network namespaces (veth); {}",
            said.trim()
        );
    }
    let figures = rounds_of(&dirs, &pids, size, rounds)?;
    if json {
        for f in &figures {
            println!("{}", serde_json::to_string(f)?);
        }
    } else {
        print(&figures);
    }
    drop((mount, sshfs, sshd, serve));
    Ok(())
}

/// Mounts, on the client side, sshfs (of `t/export` through the sshd in `ns`) on `dirs[0]`
/// and the store served at `listen` on `dirs[1]` (UCX on TCP over the veth); returns their
/// processes and what the remote mount said.
fn mount_both(
    ns: &Namespace,
    t: &Path,
    exe: &Path,
    listen: &str,
    dirs: [&PathBuf; 2],
) -> anyhow::Result<(Proc, Proc, String)> {
    let [m_sshfs, m_sy] = dirs;
    let export = t.join("export");
    std::fs::create_dir(&export)?;
    std::fs::create_dir(m_sshfs)?;
    std::fs::create_dir(m_sy)?;
    let opts = format!(
        "port=2222,IdentityFile={},StrictHostKeyChecking=no,UserKnownHostsFile=/dev/null,\
         BatchMode=yes",
        t.join("id").display()
    );
    let sshfs = Proc {
        child: Command::new("sshfs")
            .arg(format!("root@{}:{}", ns.inside, export.display()))
            .arg(m_sshfs)
            .args(["-f", "-o", &opts])
            .stderr(Stdio::null())
            .spawn()
            .context("starting sshfs")?,
        mount: Some(m_sshfs.clone()),
    };
    let mut mount = Command::new(exe);
    mount
        .args(["mount", "--remote", listen, "--key"])
        .arg(t.join("s.store.key"))
        .arg(m_sy)
        .env("UCX_TLS", "tcp")
        .env("UCX_NET_DEVICES", &ns.here)
        .stdout(Stdio::piped());
    let mut mount = Proc {
        child: mount.spawn().context("starting mount --remote")?,
        mount: Some(m_sy.clone()),
    };
    let said = first_line(&mut mount.child)?;
    wait_for("the sshfs mount", || mounted(m_sshfs))?;
    wait_for("the remote mount", || mounted(m_sy))?;
    Ok((sshfs, mount, said))
}

/// Starts sshd inside `ns` on port 2222 with keys made in `t` (the client's is `t/id`).
fn start_sshd(ns: &Namespace, t: &Path) -> anyhow::Result<Proc> {
    for k in ["host", "id"] {
        run(Command::new("ssh-keygen")
            .args(["-q", "-t", "ed25519", "-N", "", "-f"])
            .arg(t.join(k)))?;
    }
    std::fs::copy(t.join("id.pub"), t.join("authorized"))?;
    let config = t.join("sshd_config");
    std::fs::write(
        &config,
        format!(
            "Port 2222\nListenAddress {}\nHostKey {}\nAuthorizedKeysFile {}\n\
             PermitRootLogin prohibit-password\nPasswordAuthentication no\nUsePAM no\n\
             StrictModes no\nPidFile {}\nSubsystem sftp internal-sftp\n",
            ns.inside,
            t.join("host").display(),
            t.join("authorized").display(),
            t.join("sshd.pid").display()
        ),
    )?;
    // sshd's privilege separation directory.
    std::fs::create_dir_all("/run/sshd")?;
    let mut c = ns.command("/usr/sbin/sshd");
    c.args(["-D", "-e", "-f"])
        .arg(&config)
        .stderr(Stdio::null());
    let p = Proc {
        child: c.spawn().context("starting sshd")?,
        mount: None,
    };
    let addr: SocketAddr = format!("{}:2222", ns.inside).parse()?;
    wait_for("sshd", || {
        TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok()
    })?;
    Ok(p)
}

/// Every job on both systems in rotated rounds; medians.
fn rounds_of(
    dirs: &[&PathBuf; 2],
    pids: &Pids,
    size: &str,
    rounds: usize,
) -> anyhow::Result<Vec<Figure>> {
    // [job][system] → per round (bytes/s, server s/GiB, client s/GiB).
    let mut got = vec![vec![Vec::new(); 2]; JOBS.len()];
    for round in 0..rounds {
        for (ji, job) in JOBS.iter().enumerate() {
            for k in 0..2 {
                let si = (k + round) % 2;
                let (s0, c0) = (tree_cpu(pids[si].0), tree_cpu(pids[si].1));
                let (bw, bytes) = fio(dirs[si], job, size)?;
                let gib = (bytes / (1u64 << 30) as f64).max(1e-9);
                let (s1, c1) = (tree_cpu(pids[si].0), tree_cpu(pids[si].1));
                got[ji][si].push((
                    bw,
                    (s1 - s0).as_secs_f64() / gib,
                    (c1 - c0).as_secs_f64() / gib,
                ));
            }
        }
    }
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let mut out = Vec::new();
    for (ji, job) in JOBS.iter().enumerate() {
        for (si, system) in SYSTEMS.iter().enumerate() {
            let v = &got[ji][si];
            let ratios = v.iter().zip(&got[ji][0]).map(|(x, y)| x.0 / y.0);
            out.push(Figure {
                job: job.name,
                system,
                mib_per_s: median(v.iter().map(|x| x.0 / (1 << 20) as f64).collect()),
                vs_sshfs: median(ratios.collect()),
                server_cpu_s_per_gib: median(v.iter().map(|x| x.1).collect()),
                client_cpu_s_per_gib: median(v.iter().map(|x| x.2).collect()),
            });
        }
    }
    Ok(out)
}

fn print(figures: &[Figure]) {
    println!(
        "{:>15} {:>11} {:>10} {:>9} {:>15} {:>15}",
        "job", "system", "MiB/s", "÷ sshfs", "server cpu/GiB", "client cpu/GiB"
    );
    for f in figures {
        println!(
            "{:>15} {:>11} {:>10.1} {:>9.2} {:>14.2}s {:>14.2}s",
            f.job,
            f.system,
            f.mib_per_s,
            f.vs_sshfs,
            f.server_cpu_s_per_gib,
            f.client_cpu_s_per_gib
        );
    }
}
