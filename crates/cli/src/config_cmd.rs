//! `switchyard config`: the configuration in effect as commented TOML.

use anyhow::Context;
use clap::Args;
use switchyard_config::{Config, Sources};
use switchyard_options::MoverArgs;

/// `config` options.
#[derive(Args)]
pub struct ConfigArgs {
    #[command(flatten)]
    mover: MoverArgs,
}

/// Prints every key of the configuration in effect — the defaults, then the configuration
/// file's values, then the engine profile's — under its documentation and with where its
/// value came from, as TOML a user can start a configuration file from.
pub fn run(a: &ConfigArgs) -> anyhow::Result<()> {
    let file: Option<toml::Table> = match &a.mover.config {
        Some(p) => {
            let text =
                std::fs::read_to_string(p).with_context(|| format!("config {}", p.display()))?;
            Some(toml::from_str(&text).with_context(|| format!("config {}", p.display()))?)
        }
        None => None,
    };
    let now = a.mover.load_config()?;
    let mut before_profile: Config = match &file {
        Some(t) => t.clone().try_into()?,
        None => Config::default(),
    };
    if now.mover.applied_profile.is_none() {
        before_profile = now.clone();
    }
    println!(
        "# The configuration in effect: the defaults{}{}.\n# Each key is documented above it; \
         the comment after it says where its value comes from.\n# Save this as a file and pass \
         it with --config to start your own.\n",
        a.mover
            .config
            .as_ref()
            .map(|p| format!(", then {}", p.display()))
            .unwrap_or_default(),
        match &now.mover.applied_profile {
            Some(_) => format!(", then the engine profile {}", now.mover.mover.profile),
            None => String::new(),
        }
    );
    print!(
        "{}",
        now.to_commented_toml(Sources {
            file: file.as_ref(),
            before_profile: &before_profile,
        })
    );
    Ok(())
}
