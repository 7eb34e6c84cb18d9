//! Tenants on the store's handles (module `switchyard_mover::qos`): a descriptor takes its
//! tenant from the configuration's rules when it is opened (this process's uid, the path as
//! opened), or from `Fs::set_tenant`; its synchronous and asynchronous copies carry it, and a
//! future keeps the tenant it was made with wherever it is polled.

use std::sync::Arc;

use switchyard_engine::{ThreadsConfig, ThreadsEngine};
use switchyard_media::{Persist, Region};
use switchyard_mover::config::{TenantConfig, Thresholds};
use switchyard_mover::{qos, Config, Mover};
use switchyard_rt::Executor;
use switchyard_store::{Fs, OpenFlags, Owner, Store};

const WEB: u16 = 1;
const ARCHIVE: u16 = 2;
const ME: u16 = 3;

/// A store whose mover has a latency tenant for `/web`, a bulk tenant for `/archive`, a
/// tenant for this process's uid under `/mine`, and one chosen by hand only.
fn fresh() -> Fs {
    let mut c = Config::default();
    c.engine.channels = 2;
    c.mover.thresholds = Thresholds::all(64 << 10);
    c.qos.tenants = vec![
        TenantConfig {
            paths: vec!["/web".into()],
            ..TenantConfig::latency("web", 1e6)
        },
        TenantConfig {
            paths: vec!["/archive".into()],
            ..TenantConfig::bulk("archive")
        },
        TenantConfig {
            uids: vec![Owner::current().uid],
            paths: vec!["/mine".into()],
            ..TenantConfig::bulk("me")
        },
        TenantConfig::bulk("byhand"),
    ];
    c.validate().unwrap();
    let persist = Persist::detect();
    let engine = ThreadsEngine::start(ThreadsConfig {
        channels: 2,
        pin: false,
        persist,
        ..ThreadsConfig::default()
    })
    .unwrap();
    let m = Arc::new(Mover::with_engine(&c, Arc::new(engine), persist));
    let region = Region::memory(64 << 20, persist).unwrap();
    let fs = Fs::new(Store::format(region, m, Owner::current()).unwrap());
    for d in ["/web", "/archive", "/mine"] {
        fs.mkdir(d, 0o755).unwrap();
    }
    fs
}

const RW: OpenFlags = OpenFlags {
    read: true,
    write: true,
    create: true,
    exclusive: false,
    truncate: false,
    append: false,
};

/// Bytes each tenant copied, by 1-based id.
fn bytes(fs: &Fs) -> Vec<u64> {
    let t = fs.store().mover().tenants();
    std::iter::once(0)
        .chain(t.iter().map(|t| t.bytes))
        .collect()
}

fn data(n: usize, seed: u8) -> Vec<u8> {
    (0..n).map(|i| (i as u8).wrapping_mul(31) ^ seed).collect()
}

/// Each descriptor's copies are counted under the tenant its path and uid give, reads and
/// writes alike; a file under no rule is nobody's; `set_tenant` overrides the rules.
#[test]
fn a_descriptor_carries_the_tenant_its_path_and_uid_give() {
    let fs = fresh();
    let cases = [
        ("/web/index", WEB),
        ("/web/../archive/./old", ARCHIVE),
        ("/mine/f", ME),
        ("/other", 0),
        ("/archived", 0),
    ];
    for (path, tenant) in cases {
        let fd = fs.open(path, RW, 0o644).unwrap();
        assert_eq!(fs.tenant(fd).unwrap(), tenant, "{path}");
        let before = bytes(&fs);
        let d = data(256 << 10, tenant as u8);
        fs.pwrite(fd, &d, 0).unwrap();
        let mut back = vec![0; d.len()];
        assert_eq!(fs.pread(fd, &mut back, 0).unwrap(), d.len());
        assert_eq!(back, d);
        let after = bytes(&fs);
        for (t, (a, b)) in after.iter().zip(&before).enumerate() {
            let want = if t == tenant as usize && t != 0 {
                2 * d.len() as u64
            } else {
                0
            };
            assert_eq!(a - b, want, "{path}: tenant {t}");
        }
        fs.close(fd).unwrap();
    }
    let fd = fs.open("/other", RW, 0).unwrap();
    fs.set_tenant(fd, 4).unwrap();
    fs.pwrite(fd, &data(128 << 10, 9), 0).unwrap();
    assert_eq!(bytes(&fs)[4], 128 << 10);
    assert!(fs.set_tenant(switchyard_store::Fd(999), 1).is_err());
}

/// A descriptor with no tenant takes the calling thread's (`qos::enter`); an asynchronous
/// call carries the descriptor's tenant, or the tenant of the thread that made it, wherever
/// it is polled.
#[test]
fn asynchronous_calls_and_thread_scopes_carry_their_tenant() {
    let fs = fresh();
    let fd = fs.open("/other", RW, 0o644).unwrap();
    {
        let _web = qos::enter(WEB);
        fs.pwrite(fd, &data(128 << 10, 1), 0).unwrap();
    }
    assert_eq!(bytes(&fs)[WEB as usize], 128 << 10);
    let archived = fs.open("/archive/a", RW, 0o644).unwrap();
    let ex = Executor::new();
    // Made inside a scope, polled outside it.
    let made_as_web = {
        let _web = qos::enter(WEB);
        fs.pwrite_async(fd, data(64 << 10, 2), 0)
    };
    let (r, _) = ex.block_on(made_as_web);
    r.unwrap();
    assert_eq!(bytes(&fs)[WEB as usize], 192 << 10);
    // The descriptor's tenant wins over the thread's.
    let _me = qos::enter(ME);
    let (r, _) = ex.block_on(fs.pwrite_async(archived, data(96 << 10, 3), 0));
    r.unwrap();
    let (r, buf) = ex.block_on(fs.pread_async(archived, vec![0; 96 << 10], 0));
    assert_eq!(r.unwrap(), 96 << 10);
    assert_eq!(buf, data(96 << 10, 3));
    let b = bytes(&fs);
    assert_eq!(b[ARCHIVE as usize], 192 << 10);
    assert_eq!(b[ME as usize], 0);
}
