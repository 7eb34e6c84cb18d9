//! Which tenant a request belongs to when its caller cannot say: the tenant a thread's
//! requests carry ([`enter`]), and the rules that class a mount's or a program's callers by
//! uid and path ([`Classes`], from `uids` and `paths` in `[[qos.tenants]]`).

use std::cell::Cell;
use std::marker::PhantomData;

use crate::config::QosConfig;

thread_local! {
    /// The tenant this thread's requests carry where their hints name none (0: none).
    static CURRENT: Cell<u16> = const { Cell::new(0) };
}

/// The tenant this thread's requests carry where their [`Hints`](crate::Hints) name none
/// (0: unclassed).
#[inline]
pub fn current() -> u16 {
    CURRENT.with(Cell::get)
}

/// While this lives, the thread's requests whose hints name no tenant carry the one it
/// entered. Dropping it restores the tenant before it, so scopes nest. It stays on the thread
/// that made it (not `Send`).
#[must_use = "the tenant is left when the scope drops"]
pub struct TenantScope {
    /// The tenant to restore; `None` when entering changed nothing (tenant 0).
    previous: Option<u16>,
    _thread: PhantomData<*const ()>,
}

/// Enters `tenant` (1-based into `qos.tenants`) on this thread: how a store call or a mount
/// request, which cannot hand [`Hints`](crate::Hints) down to its copies, classes them.
/// Tenant 0 keeps whatever tenant the thread already carries.
pub fn enter(tenant: u16) -> TenantScope {
    // Tenant 0 (every request where no tenants are configured) touches nothing.
    let previous = (tenant != 0).then(|| CURRENT.with(|c| c.replace(tenant)));
    TenantScope {
        previous,
        _thread: PhantomData,
    }
}

/// Sets this thread's tenant (0: none) until it is set again, for callers that cannot hold a
/// [`TenantScope`] (the C library); returns the tenant before.
pub fn set_current(tenant: u16) -> u16 {
    CURRENT.with(|c| c.replace(tenant))
}

impl Drop for TenantScope {
    fn drop(&mut self) {
        if let Some(previous) = self.previous {
            CURRENT.with(|c| c.set(previous));
        }
    }
}

/// One tenant's rule.
#[derive(Debug, Clone, PartialEq)]
struct Rule {
    tenant: u16,
    uids: Vec<u32>,
    /// Path prefixes, as components.
    paths: Vec<Vec<Vec<u8>>>,
}

/// The rules that class callers by uid and path: a request is the first tenant (in
/// `qos.tenants` order) all of whose given rules match it: its caller's uid is among `uids`
/// if that is given, and its file lies under one of `paths` (a whole-component prefix: `/a`
/// holds `/a` and `/a/b`, not `/ab`) if that is given. A tenant with neither is never chosen
/// by rule (only by [`Hints::tenant`](crate::Hints::tenant) or [`enter`]); nothing matched:
/// 0, unclassed.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Classes {
    rules: Vec<Rule>,
}

impl Classes {
    /// The rules of `config`'s tenants (none without tenants or without `uids` and `paths`).
    pub fn new(config: &QosConfig) -> Classes {
        let rules = config
            .tenants
            .iter()
            .enumerate()
            .filter(|(_, t)| !t.uids.is_empty() || !t.paths.is_empty())
            .map(|(i, t)| Rule {
                tenant: (i + 1) as u16,
                uids: t.uids.clone(),
                paths: t.paths.iter().map(|p| components(p.as_bytes())).collect(),
            })
            .collect();
        Classes { rules }
    }

    /// Whether there are no rules (every caller unclassed).
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// Whether some rule looks at paths (a front end then keeps the paths of its files).
    pub fn by_path(&self) -> bool {
        self.rules.iter().any(|r| !r.paths.is_empty())
    }

    /// The tenant of a request by `uid` on the file at `path` (in the store, from its root;
    /// `None` where it is not known, which a path rule never matches); 0 if no rule matches.
    pub fn of(&self, uid: u32, path: Option<&[u8]>) -> u16 {
        if self.rules.is_empty() {
            return 0;
        }
        let path = path.filter(|_| self.by_path()).map(components);
        self.rules
            .iter()
            .find(|r| {
                (r.uids.is_empty() || r.uids.contains(&uid))
                    && (r.paths.is_empty()
                        || path
                            .as_ref()
                            .is_some_and(|p| r.paths.iter().any(|prefix| p.starts_with(prefix))))
            })
            .map_or(0, |r| r.tenant)
    }
}

/// A path's components: empty ones and `.` dropped, `..` taking the one before it away.
fn components(path: &[u8]) -> Vec<Vec<u8>> {
    let mut out: Vec<Vec<u8>> = Vec::new();
    for c in path.split(|&b| b == b'/') {
        match c {
            b"" | b"." => {}
            b".." => {
                out.pop();
            }
            c => out.push(c.to_vec()),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::TenantConfig;

    fn classes() -> Classes {
        let web = TenantConfig {
            uids: vec![33],
            ..TenantConfig::latency("web", 20.0)
        };
        let logs = TenantConfig {
            paths: vec!["/var/log".into()],
            ..TenantConfig::bulk("logs")
        };
        let backup = TenantConfig {
            uids: vec![34],
            paths: vec!["/".into()],
            ..TenantConfig::bulk("backup")
        };
        Classes::new(&QosConfig {
            tenants: vec![web, logs, backup, TenantConfig::bulk("byhand")],
            ..QosConfig::default()
        })
    }

    /// The first tenant whose given rules all match wins; paths match whole components; a
    /// tenant without rules is never chosen; an unknown path matches no path rule.
    #[test]
    fn the_first_tenant_whose_rules_all_match_wins() {
        let c = classes();
        assert!(c.by_path() && !c.is_empty());
        assert_eq!(
            c.of(33, Some(b"/var/log/x")),
            1,
            "uid before path: first rule"
        );
        assert_eq!(c.of(0, Some(b"/var/log")), 2);
        assert_eq!(c.of(0, Some(b"//var/./log/a/../b")), 2);
        assert_eq!(c.of(0, Some(b"/var/logs/x")), 0, "whole components only");
        assert_eq!(c.of(0, None), 0);
        assert_eq!(c.of(34, Some(b"/anything")), 3);
        assert_eq!(c.of(34, None), 0, "an unknown path fails a path rule");
        assert!(Classes::new(&QosConfig::default()).is_empty());
    }

    /// A scope sets the thread's tenant, tenant 0 keeps the outer one, and dropping restores
    /// it; another thread never sees it.
    #[test]
    fn scopes_nest_and_stay_on_their_thread() {
        assert_eq!(current(), 0);
        let outer = enter(2);
        {
            let _keep = enter(0);
            assert_eq!(current(), 2);
            let _inner = enter(5);
            assert_eq!(current(), 5);
            std::thread::spawn(|| assert_eq!(current(), 0))
                .join()
                .unwrap();
        }
        assert_eq!(current(), 2);
        drop(outer);
        assert_eq!(current(), 0);
    }
}
