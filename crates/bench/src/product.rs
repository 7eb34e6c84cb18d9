//! The product program, `switchyard`, for the benchmarks that time its commands in processes
//! of their own (`bench large`, `bench remote --sshfs`).

use std::path::PathBuf;

use anyhow::{bail, Context};

/// The `switchyard` program beside this one (cargo builds both into one directory), or an
/// error that says how to build it.
pub fn program() -> anyhow::Result<PathBuf> {
    let me = std::env::current_exe().context("finding this program")?;
    let product = me.with_file_name("switchyard");
    if !product.is_file() {
        bail!(
            "this benchmark runs the product's commands, and {} is not there: build it with \
             `cargo build --release -p switchyard`",
            product.display()
        );
    }
    Ok(product)
}
