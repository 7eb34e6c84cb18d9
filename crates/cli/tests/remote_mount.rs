//! A served store mounted through its client (`switchyard mount --remote`), used by real,
//! unmodified programs: the same programs and checks as on the store's own mount, with the
//! server and the mount in processes of their own; and two mounts of one server seeing each
//! other's changes.

mod common;

use common::{programs, Mount};

#[test]
fn posix_operations_and_errnos_through_a_remote_mount() {
    programs::posix_operations_and_errnos(Mount::remote);
}

#[test]
fn tar_cp_and_git_on_a_remote_mount() {
    programs::tar_cp_and_git(Mount::remote);
}

#[test]
fn sqlite_builds_a_database_on_a_remote_mount() {
    programs::sqlite_transactions(Mount::remote);
}

#[test]
fn fio_jobs_verify_on_a_remote_mount() {
    programs::fio_jobs_verify(Mount::remote);
}
