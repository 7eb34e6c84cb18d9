//! The configuration as commented TOML (`switchyard config`): every key with its value in
//! effect, what it does (the field's own documentation in the layer that owns it, read from
//! [`Config`]'s JSON schema, so there is no second copy to go stale) and where the value
//! comes from — the built-in default, the configuration file, or the engine profile.

use schemars::schema_for;
use serde_json::Value as Json;
use toml::{Table, Value};

use crate::Config;

/// Where the values of a configuration came from.
#[derive(Debug, Clone, Copy)]
pub struct Sources<'a> {
    /// The configuration file's table, if one was read.
    pub file: Option<&'a Table>,
    /// The configuration before the engine profile was applied (the file over the
    /// defaults); keys whose value differs from it come from the profile.
    pub before_profile: &'a Config,
}

impl Config {
    /// This configuration as TOML a user can start a configuration file from: every section
    /// and key, each key under its documentation and followed by where its value comes from.
    pub fn to_commented_toml(&self, sources: Sources<'_>) -> String {
        let schema = serde_json::to_value(schema_for!(Config)).expect("a schema serializes");
        let now = Value::try_from(self).expect("a configuration serializes");
        let before = Value::try_from(sources.before_profile).expect("a configuration serializes");
        let mut out = String::new();
        let walk = Walk {
            defs: &schema["$defs"],
            file: sources.file,
        };
        walk.section(
            &mut out,
            &mut Vec::new(),
            now.as_table().expect("a table"),
            before.as_table().expect("a table"),
            &schema,
        );
        out
    }
}

/// What a walk over the sections shares.
struct Walk<'a> {
    /// The schema's definitions, which `$ref`s name.
    defs: &'a Json,
    file: Option<&'a Table>,
}

impl Walk<'_> {
    /// Writes the keys of the section at `path` (its values `now`, before the profile
    /// `before`, its schema `node`), then its subsections.
    fn section(
        &self,
        out: &mut String,
        path: &mut Vec<String>,
        now: &Table,
        before: &Table,
        node: &Json,
    ) {
        let node = self.resolve(node);
        for (key, value) in now.iter().filter(|(_, v)| !v.is_table()) {
            let prop = &node["properties"][key];
            comment(out, description(prop, self.resolve(prop)));
            if let Some(choices) = choices(self.resolve(prop)) {
                comment(out, &choices);
            }
            let source = if before.get(key) != Some(value) {
                "engine profile"
            } else if self.in_file(path, key) {
                "configuration file"
            } else {
                "default"
            };
            out.push_str(&format!("{key} = {value}  # {source}\n"));
        }
        for (key, value) in now.iter().filter(|(_, v)| v.is_table()) {
            let prop = &node["properties"][key];
            path.push(key.clone());
            out.push_str(&format!("\n[{}]\n", path.join(".")));
            comment(out, description(prop, self.resolve(prop)));
            let empty = Table::new();
            let before = before.get(key).and_then(Value::as_table).unwrap_or(&empty);
            self.section(out, path, value.as_table().expect("a table"), before, prop);
            path.pop();
        }
    }

    /// The schema a property's `$ref` names, or the property itself.
    fn resolve<'s>(&'s self, node: &'s Json) -> &'s Json {
        match node["$ref"]
            .as_str()
            .and_then(|r| r.strip_prefix("#/$defs/"))
        {
            Some(name) => &self.defs[name],
            None => node,
        }
    }

    /// Whether the configuration file sets `key` in the section at `path`.
    fn in_file(&self, path: &[String], key: &str) -> bool {
        let mut t = match self.file {
            Some(t) => t,
            None => return false,
        };
        for p in path {
            match t.get(p).and_then(Value::as_table) {
                Some(sub) => t = sub,
                None => return false,
            }
        }
        t.contains_key(key)
    }
}

/// A property's documentation: its own, else that of the type it refers to.
fn description<'a>(prop: &'a Json, resolved: &'a Json) -> &'a str {
    prop["description"]
        .as_str()
        .or_else(|| resolved["description"].as_str())
        .unwrap_or("")
}

/// The values an enumerated key takes, each with its documentation when it has one.
fn choices(schema: &Json) -> Option<String> {
    if let Some(values) = schema["enum"].as_array() {
        let names: Vec<String> = values.iter().map(|v| v.to_string()).collect();
        return Some(format!("One of: {}.", names.join(", ")));
    }
    let variants = schema["oneOf"].as_array()?;
    let said: Vec<String> = variants
        .iter()
        .filter_map(|v| {
            let name = v["const"].to_string();
            let doc = v["description"].as_str()?;
            Some(format!("{name}: {doc}"))
        })
        .collect();
    (!said.is_empty()).then(|| format!("One of: {}", said.join(" ")))
}

/// Writes `text` as `#` comment lines, one paragraph per line, wrapped at 95 columns.
fn comment(out: &mut String, text: &str) {
    // Rust doc links read as plain code in a comment.
    let text = text.replace("[`", "`").replace("`]", "`");
    for paragraph in text.split("\n\n") {
        let mut line = String::from("#");
        for word in paragraph.split_whitespace() {
            if line.len() + 1 + word.len() > 95 && line.len() > 1 {
                out.push_str(&line);
                out.push('\n');
                line = String::from("#");
            }
            line.push(' ');
            line.push_str(word);
        }
        if line.len() > 1 {
            out.push_str(&line);
            out.push('\n');
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_key_is_documented_and_the_output_loads_back() {
        let cfg = Config::default();
        let text = cfg.to_commented_toml(Sources {
            file: None,
            before_profile: &cfg,
        });
        let mut last_comment = false;
        for line in text.lines() {
            if line.starts_with('#') {
                last_comment = true;
            } else if line.contains(" = ") {
                assert!(last_comment, "no documentation above {line:?}");
                assert!(line.ends_with("# default"), "{line}");
                last_comment = false;
            }
        }
        for section in [
            "[engine]",
            "[media]",
            "[mover.adaptation]",
            "[qos]",
            "[runtime]",
        ] {
            assert!(text.contains(section), "{section} missing:\n{text}");
        }
        for key in [
            "max_park_us = 1000",
            "sync = \"interval\"",
            "attr_ttl_ms = 60000",
        ] {
            assert!(text.contains(&format!("{key}  # default")), "{key} missing");
        }
        let back: Config = toml::from_str(&text).expect("the output is a configuration file");
        assert_eq!(back, cfg);
    }

    #[test]
    fn sources_name_the_file_and_the_profile() {
        let file: Table = toml::from_str("[mover]\nsplit = false\n").unwrap();
        let before: Config = file.clone().try_into().unwrap();
        let mut now = before.clone();
        now.mover.mover.concurrency_limit = 3;
        let text = now.to_commented_toml(Sources {
            file: Some(&file),
            before_profile: &before,
        });
        assert!(
            text.contains("split = false  # configuration file"),
            "{text}"
        );
        assert!(
            text.contains("concurrency_limit = 3  # engine profile"),
            "{text}"
        );
        assert!(text.contains("queue_depth = 64  # default"), "{text}");
    }
}
