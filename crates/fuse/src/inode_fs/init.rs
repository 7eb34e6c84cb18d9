//! What the mount asks of the kernel at `init`, and what it was granted.

use fuser::KernelConfig;
use switchyard_store::Inodes;

use super::InodeFs;
use crate::configure;

/// What the kernel granted at `init`, of what a mount may ask for beyond the basics.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Granted {
    /// The writeback cache: the kernel gathers writes in its page cache, places appends
    /// itself (it knows the size), and sends its cached pages through any handle open for
    /// writing.
    pub(super) writeback: bool,
    /// Set-id bits and capabilities are this file system's to drop (`FUSE_HANDLE_KILLPRIV_V2`,
    /// see [`super::privileges`]).
    pub(super) kill_privileges: bool,
}

impl<I: Inodes> InodeFs<I> {
    /// Asks the kernel, at `init`, for what this mount uses: what every mount here asks
    /// ([`configure`]), and what these inodes allow.
    pub(super) fn ask(&self, config: &mut KernelConfig) -> Granted {
        // Large requests: a 1 MiB write is one request, one commit.
        let writeback = configure(config, self.replies);
        // Without it the kernel asks for `security.capability` before every write (a
        // request each); with it, it asks once per inode and attribute refresh, and this
        // file system drops set-id bits and capabilities where the kernel says.
        let kill_privileges = config
            .add_capabilities(fuser::InitFlags::FUSE_HANDLE_KILLPRIV_V2)
            .is_ok();
        // POSIX ACLs: the kernel checks them (it reads an inode's access ACL for a caller
        // who is not its owner) and the store keeps them and the mode in step; the umask is
        // the store's to apply, since a directory's default ACL overrides it.
        let _ = config
            .add_capabilities(fuser::InitFlags::FUSE_POSIX_ACL | fuser::InitFlags::FUSE_DONT_MASK);
        if self.inodes.record_locks() {
            // POSIX record locks go to the inodes (shared by every client), not the kernel's
            // own table (this mount's alone).
            let _ = config.add_capabilities(fuser::InitFlags::FUSE_POSIX_LOCKS);
        }
        if !self.cache_ttl.is_zero() {
            // Listings with attributes where the kernel may cache them: `ls -l` and `find`
            // need no lookup per name. Always, not when the kernel sees lookups follow a
            // listing (`FUSE_READDIRPLUS_AUTO`): a lookup here costs little, a request much
            // (a cold `find -ls` of 100,000 files took 0.99 s with it, 0.61 s without).
            let _ = config.add_capabilities(fuser::InitFlags::FUSE_DO_READDIRPLUS);
        }
        if self.inodes.shared() {
            // Every read asks for the attributes (never cached, see `cache_ttl`), and cached
            // pages go when the size or mtime moved: a file held open (a database) sees
            // another client's writes once it holds the lock that orders them.
            let _ = config.add_capabilities(fuser::InitFlags::FUSE_AUTO_INVAL_DATA);
        }
        Granted {
            writeback,
            kill_privileges,
        }
    }
}
