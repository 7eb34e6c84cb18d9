//! `switchyard serve`: the store's single owner, answering clients on other processes and
//! machines; and the `ADDR:PORT:/path` operands by which `ls` and `cp` reach a served store.

use std::net::{SocketAddr, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use anyhow::Context;
use clap::Args;
use switchyard_remote::{serve, Client, Key, ServeOptions, ServerStats};

use crate::mount_cmd::block_stop_signals;
use crate::store_cmd::StoreArgs;

/// `serve` options.
#[derive(Args)]
pub struct ServeArgs {
    #[command(flatten)]
    at: StoreArgs,
    /// Address and port to listen on. The default takes clients of this machine only; give
    /// `0.0.0.0:7070` (or one interface's address) to take other machines' too.
    #[arg(long, default_value = "127.0.0.1:7070")]
    listen: SocketAddr,
    /// Refuse every change: clients may only read (they get read-only memory keys).
    #[arg(long)]
    read_only: bool,
    /// The secret clients must prove they hold [default: the store file's path with `.key`
    /// added]. Created, readable by you alone, if missing; refused if others can read it.
    /// Clients on other machines need a copy of it (`--key` of `ls` and `cp`).
    #[arg(long)]
    key: Option<PathBuf>,
}

/// The default key file of a store: its path with `.key` added.
pub fn default_key(store: &Path) -> PathBuf {
    let mut p = store.as_os_str().to_owned();
    p.push(".key");
    PathBuf::from(p)
}

/// Serves the store until SIGINT, SIGTERM or SIGHUP; it is unmounted cleanly before this
/// returns.
pub fn run(a: &ServeArgs) -> anyhow::Result<()> {
    switchyard_remote::keep_message_buffers();
    let set = block_stop_signals();
    let key_path = a.key.clone().unwrap_or_else(|| default_key(&a.at.store));
    let key = Key::load_or_create(&key_path)?;
    let store = a.at.open()?;
    let durability = crate::store_cmd::durability(&store);
    let opts = ServeOptions {
        listen: a.listen,
        read_only: a.read_only,
        key,
    };
    let stop = Arc::new(AtomicBool::new(false));
    let stopper = stop.clone();
    std::thread::spawn(move || {
        let mut sig = 0;
        // SAFETY: `set` is an initialised signal set blocked in every thread of the process.
        unsafe { libc::sigwait(&set, &mut sig) };
        eprintln!("signal {sig}: stopping");
        stopper.store(true, Ordering::Relaxed);
    });
    let stats = Arc::new(ServerStats::default());
    // Counters for `switchyard stat`: the mover's and the server's, every few seconds.
    let saver = {
        let (stats, stop) = (stats.clone(), stop.clone());
        let mover = store.shared_mover();
        let (file, remote) = (
            a.at.stats_path(),
            switchyard_options::counters::remote_path(&a.at.store),
        );
        let listen = a.listen.to_string();
        let durability = durability.clone();
        std::thread::spawn(move || {
            let mut tick = crate::mount_cmd::saving(|| {
                switchyard_options::counters::save_with(&file, "serve", &mover, Some(&durability))?;
                switchyard_options::counters::save_remote(&remote, "serve", &listen, &stats.rows())
            });
            while !stop.load(Ordering::Relaxed) {
                tick(false);
                std::thread::sleep(std::time::Duration::from_millis(200));
            }
            tick(true);
        })
    };
    let served = serve(&store, &opts, &stats, &stop, |bound| {
        println!(
            "serving {} on {bound}{} (key {}); stop with Ctrl-C or `kill {}`",
            a.at.store.display(),
            if a.read_only { ", read-only" } else { "" },
            key_path.display(),
            std::process::id()
        );
        println!("{}", crate::store_cmd::show_durability(&durability));
        println!("engine: {}", store.shared_mover().engine_reason());
    });
    stop.store(true, Ordering::Relaxed);
    let _ = saver.join();
    served?;
    store.unmount()?;
    let n = |c: &std::sync::atomic::AtomicU64| c.load(Ordering::Relaxed);
    println!(
        "stopped; the store is clean ({} connections, {} refused, {} requests, {} bytes \
         committed one-sided, {} bytes pulled, {} bytes in messages, {} reservations \
         abandoned, {} clients cut off for messages they did not take)",
        n(&stats.connections),
        n(&stats.refused),
        n(&stats.requests),
        n(&stats.committed_bytes),
        n(&stats.pulled_bytes),
        n(&stats.message_bytes),
        n(&stats.abandoned),
        n(&stats.cut_off)
    );
    Ok(())
}

/// A served store's path operand, `ADDR:PORT:/path` (`[v6]:PORT:/path`, or a host name).
pub struct Remote {
    /// The server.
    pub addr: SocketAddr,
    /// The path in its store.
    pub path: String,
}

impl Remote {
    /// `operand` as a remote path, if it is one.
    pub fn parse(operand: &str) -> Option<Remote> {
        let (addr, path) = operand.split_once(":/")?;
        let addr = addr.to_socket_addrs().ok()?.next()?;
        Some(Remote {
            addr,
            path: format!("/{path}"),
        })
    }

    /// Connects with the key at `key` (writable when `write`).
    pub fn connect(&self, key: &Path, write: bool) -> anyhow::Result<Client> {
        let key = Key::load(key).context("the server's key (give its copy with --key)")?;
        Ok(Client::connect(self.addr, &key, write)?)
    }
}
