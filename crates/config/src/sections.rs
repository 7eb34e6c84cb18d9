//! Reading the file: each top-level table goes to the layer that owns it, deserialized by
//! that layer's own type straight from the parser, so an error in a section keeps its line.

use std::fmt;

use serde::de::{Deserialize, Deserializer, MapAccess, Visitor};

use crate::Config;

/// The file's top-level tables, one per section; any other name is an error that lists these.
/// The mover's four are the fields of `switchyard_mover::Config`: a section added there must
/// be added here, or the commented output's round trip (`commented::tests`) fails.
#[derive(serde::Deserialize)]
#[serde(field_identifier, rename_all = "lowercase")]
enum Section {
    Engine,
    Media,
    Mover,
    Qos,
    Runtime,
    Store,
    Fuse,
}

impl<'de> Deserialize<'de> for Config {
    /// Every section the file has, from its layer's type; the others keep their defaults.
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Config, D::Error> {
        d.deserialize_map(Sections)
    }
}

/// Visits the file's top-level table.
struct Sections;

impl<'de> Visitor<'de> for Sections {
    type Value = Config;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a table of configuration sections")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Config, A::Error> {
        let mut c = Config::default();
        while let Some(section) = map.next_key::<Section>()? {
            match section {
                Section::Engine => c.mover.engine = map.next_value()?,
                Section::Media => c.mover.media = map.next_value()?,
                Section::Mover => c.mover.mover = map.next_value()?,
                Section::Qos => c.mover.qos = map.next_value()?,
                Section::Runtime => c.runtime = map.next_value()?,
                Section::Store => c.store = map.next_value()?,
                Section::Fuse => c.fuse = map.next_value()?,
            }
        }
        Ok(c)
    }
}
