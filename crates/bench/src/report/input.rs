//! The inputs of `switchyard report`, read and checked: the JSON records of
//! `switchyard bench copy --json` and `switchyard bench mix --json` (one object per line, the
//! summary last) and the object of `switchyard tune --json`.
//!
//! Only the fields the figures use are read, so a bench may add fields without breaking its
//! reports. A file of another command's output, a malformed record, a missing field or a run
//! cut short is an error naming the file, the line and what is wrong.

use std::path::Path;

use anyhow::{anyhow, bail, Context};
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::Value;
use switchyard_mover::profile::Profile;

use crate::measure::{Media, Setup};

/// Which command wrote a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `switchyard bench copy --json`.
    Copy,
    /// `switchyard bench mix --json`.
    Mix,
    /// `switchyard tune --json`.
    Tune,
}

impl Kind {
    /// The command that writes it, as a person types it.
    pub fn command(self) -> &'static str {
        match self {
            Kind::Copy => "switchyard bench copy --json",
            Kind::Mix => "switchyard bench mix --json",
            Kind::Tune => "switchyard tune --json",
        }
    }

    /// The option of `switchyard report` that takes it.
    pub fn option(self) -> &'static str {
        match self {
            Kind::Copy => "--copy",
            Kind::Mix => "--mix",
            Kind::Tune => "--tune",
        }
    }

    /// The file name the report looks for when no input is named.
    pub fn default_file(self) -> &'static str {
        match self {
            Kind::Copy => "copy.json",
            Kind::Mix => "mix.json",
            Kind::Tune => "tune.json",
        }
    }

    /// Which command wrote `v`, by the fields each one always writes.
    fn of(v: &Value) -> Option<Kind> {
        if v.get("tune") == Some(&Value::Bool(true)) {
            Some(Kind::Tune)
        } else if v.get("bench").and_then(Value::as_str) == Some("mix") {
            Some(Kind::Mix)
        } else if v.get("record").and_then(Value::as_str) == Some("summary")
            || (v.get("path").is_some() && v.get("direction").is_some())
        {
            Some(Kind::Copy)
        } else {
            None
        }
    }
}

/// One measured point of `bench copy`: a path at one direction, size and thread count.
#[derive(Debug, Clone, Deserialize)]
pub struct CopyPoint {
    /// `glibc`, `pmdk`, `cpu`, `engine` or `scheduled`.
    pub path: String,
    /// `to_slow` (durable writes) or `from_slow` (reads).
    pub direction: String,
    /// Request size, bytes.
    pub size: u64,
    /// Application threads.
    pub threads: usize,
    /// Median latency, µs.
    pub p50_us: f64,
    /// Median GiB/s over rounds, all threads together.
    pub gib_per_s: f64,
    /// Process CPU seconds per GiB moved.
    pub cpu_s_per_gib: f64,
}

/// A `bench copy` run.
#[derive(Debug, Clone)]
pub struct CopyRun {
    /// Every point, in the order measured.
    pub points: Vec<CopyPoint>,
    /// Where and when it ran.
    pub setup: Setup,
}

impl CopyRun {
    /// The point of `path` at (`direction`, `size`, `threads`), if measured.
    pub fn point(
        &self,
        path: &str,
        direction: &str,
        size: u64,
        threads: usize,
    ) -> Option<&CopyPoint> {
        self.points.iter().find(|p| {
            p.path == path && p.direction == direction && p.size == size && p.threads == threads
        })
    }
}

/// One case of `bench mix`: a workload in one direction with some callers, every policy.
#[derive(Debug, Clone, Deserialize)]
pub struct MixCase {
    /// `bulk`, `mixed`, `tpcc`, `fileserver` or `graph`.
    pub workload: String,
    /// `to_slow` (durable writes) or `from_slow` (reads).
    pub direction: String,
    /// Callers.
    pub threads: usize,
    /// Policy → median GiB/s.
    pub gib_s: Vec<(String, f64)>,
    /// Policy → CPU seconds per GiB moved.
    pub cpu_s_per_gib: Vec<(String, f64)>,
}

impl MixCase {
    /// Policy `name`'s median GiB/s, if it ran in this case.
    pub fn gib_s(&self, name: &str) -> Option<f64> {
        self.gib_s.iter().find(|p| p.0 == name).map(|p| p.1)
    }

    /// Policy `name`'s CPU seconds per GiB, if it ran in this case.
    pub fn cpu_s_per_gib(&self, name: &str) -> Option<f64> {
        self.cpu_s_per_gib.iter().find(|p| p.0 == name).map(|p| p.1)
    }
}

/// A `bench mix` run.
#[derive(Debug, Clone)]
pub struct MixRun {
    /// Every case, in the order measured.
    pub cases: Vec<MixCase>,
    /// Where and when it ran.
    pub setup: Setup,
}

/// One point of tune's turning-point sweep: one caller, CPU alone against offloading every
/// request.
#[derive(Debug, Clone, Deserialize)]
pub struct SweepPoint {
    /// `to_slow` or `from_slow`.
    pub direction: String,
    /// Both ends 64 B aligned.
    pub aligned: bool,
    /// Request size, bytes.
    pub size: u64,
    /// Median per-round offload ÷ CPU GiB/s.
    pub ratio: f64,
}

/// Aggregate bandwidth at one thread count.
#[derive(Debug, Clone, Deserialize)]
pub struct ScalePoint {
    /// Concurrent callers.
    pub threads: usize,
    /// GiB/s, all callers together.
    pub gib_s: f64,
}

/// What `tune` measured, as far as the figures use it.
#[derive(Debug, Clone, Deserialize)]
pub struct TuneMeasurements {
    /// The turning-point sweeps.
    pub sweep: Vec<SweepPoint>,
    /// Engine-only 64 KiB reads by callers.
    pub engine_scaling: Vec<ScalePoint>,
    /// CPU-only durable 64 KiB writes by threads.
    pub writer_scaling: Vec<ScalePoint>,
}

/// A `tune` run.
#[derive(Debug, Clone)]
pub struct TuneRun {
    /// The profile it derived.
    pub profile: Profile,
    /// What it measured.
    pub measurements: TuneMeasurements,
    /// Where and when it ran (from the profile and the medium it names).
    pub setup: Setup,
}

/// The JSON values in `text` (one per line, or pretty-printed one after another), each with
/// the line it starts on.
fn values(text: &str) -> anyhow::Result<Vec<(usize, Value)>> {
    let mut stream = serde_json::Deserializer::from_str(text).into_iter::<Value>();
    let mut out = Vec::new();
    loop {
        // The line a value starts on: past the whitespace that follows the previous one.
        let start = stream.byte_offset();
        let skipped = text[start..].len() - text[start..].trim_start().len();
        let line = text[..start + skipped].matches('\n').count() + 1;
        match stream.next() {
            None => return Ok(out),
            Some(Ok(v)) => out.push((line, v)),
            Some(Err(e)) => bail!("line {}: not JSON: {e}", e.line()),
        }
    }
}

/// Reads `path` as the output of `kind`'s command: every record's line and value.
fn records(path: &Path, kind: Kind) -> anyhow::Result<Vec<(usize, Value)>> {
    let text = std::fs::read_to_string(path)?;
    let vs = values(&text)?;
    if vs.is_empty() {
        bail!("empty: expected the output of `{}`", kind.command());
    }
    for (line, v) in &vs {
        match Kind::of(v) {
            Some(k) if k == kind => {}
            Some(k) => bail!(
                "line {line} is output of `{}`, not of `{}`: pass it with {}",
                k.command(),
                kind.command(),
                k.option()
            ),
            None => bail!(
                "line {line} is not a record of `{}` (nor of another switchyard command)",
                kind.command()
            ),
        }
    }
    Ok(vs)
}

/// `value` as a `T`, or an error naming the line.
fn typed<T: DeserializeOwned>(line: usize, value: Value) -> anyhow::Result<T> {
    serde_json::from_value(value).map_err(|e| anyhow!("line {line}: {e}"))
}

/// The setup in a bench's summary record (the last record).
fn summary_setup(vs: &mut Vec<(usize, Value)>, kind: Kind) -> anyhow::Result<Setup> {
    let is_summary = |v: &Value| match kind {
        Kind::Copy => v.get("record").and_then(Value::as_str) == Some("summary"),
        _ => v.get("summary") == Some(&Value::Bool(true)),
    };
    let Some((line, mut summary)) = vs.pop().filter(|(_, v)| is_summary(v)) else {
        bail!(
            "no summary record at the end: the run did not finish; rerun `{}`",
            kind.command()
        );
    };
    let Some(setup) = summary.get_mut("setup").map(Value::take) else {
        bail!(
            "line {line}: the summary names no `setup` (machine, engine, media): it was \
             written by an older switchyard; rerun `{}`",
            kind.command()
        );
    };
    typed(line, setup).context("the summary's `setup`")
}

/// Reads the output of `switchyard bench copy --json`.
pub fn copy(path: &Path) -> anyhow::Result<CopyRun> {
    let mut vs = records(path, Kind::Copy)?;
    let setup = summary_setup(&mut vs, Kind::Copy)?;
    let points = vs
        .into_iter()
        .map(|(line, v)| typed(line, v))
        .collect::<anyhow::Result<Vec<CopyPoint>>>()?;
    if points.is_empty() {
        bail!("no measured points, only a summary");
    }
    Ok(CopyRun { points, setup })
}

/// Reads the output of `switchyard bench mix --json`.
pub fn mix(path: &Path) -> anyhow::Result<MixRun> {
    let mut vs = records(path, Kind::Mix)?;
    let setup = summary_setup(&mut vs, Kind::Mix)?;
    let cases = vs
        .into_iter()
        .map(|(line, v)| typed(line, v))
        .collect::<anyhow::Result<Vec<MixCase>>>()?;
    if cases.is_empty() {
        bail!("no measured cases, only a summary");
    }
    Ok(MixRun { cases, setup })
}

/// Reads the output of `switchyard tune --json`.
pub fn tune(path: &Path) -> anyhow::Result<TuneRun> {
    #[derive(Deserialize)]
    struct Output {
        profile: Profile,
        measurements: TuneMeasurements,
        media: Option<Media>,
        #[serde(default)]
        engine_reason: String,
    }
    let mut vs = records(path, Kind::Tune)?;
    if vs.len() > 1 {
        bail!(
            "line {}: a second object; `{}` writes one",
            vs[1].0,
            Kind::Tune.command()
        );
    }
    let (line, v) = vs.pop().expect("records are not empty");
    let out: Output = typed(line, v)?;
    let Some(media) = out.media else {
        bail!(
            "line {line}: no `media`: it was written by an older switchyard; rerun `{}`",
            Kind::Tune.command()
        );
    };
    let p = &out.profile;
    let setup = Setup {
        machine: p.machine.clone(),
        engine: p.engine.clone(),
        engine_reason: out.engine_reason.clone(),
        media,
        unix_time: p.measured.unix_time,
        quick: p.measured.quick,
    };
    Ok(TuneRun {
        profile: out.profile,
        measurements: out.measurements,
        setup,
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub const SETUP: &str = r#"{"machine":{"cpu":"Test CPU","cores":2,"flush":"clwb","simd":"avx512"},"engine":{"kind":"threads","channels":1},"media":{"region":"/dev/shm/r","kind":"file","fs":"tmpfs"},"unix_time":1795356849,"quick":true}"#;

    /// A `bench copy` output: cpu and engine, writes and reads, 4K and 64K, 1 and 2 threads.
    pub fn copy_text() -> String {
        let mut t = String::new();
        for dir in ["to_slow", "from_slow"] {
            for size in [4096, 65536] {
                for threads in [1, 2] {
                    for (path, p50, gib) in [("cpu", 1.0, 4.0), ("engine", 3.0, 2.0)] {
                        let p50 = p50 * size as f64 / 4096.0;
                        t += &format!(
                            r#"{{"path":"{path}","direction":"{dir}","size":{size},"threads":{threads},"durable":true,"p50_us":{p50},"p99_us":9.0,"gib_per_s":{gib},"self_ratio":1.0,"round_gib_per_s":[{gib}],"cpu_s_per_gib":0.25,"engine":"threads (1 channel)","media":"file region"}}"#
                        );
                        t.push('\n');
                    }
                }
            }
        }
        t + &format!(r#"{{"record":"summary","noise_floor_min":1.0,"setup":{SETUP}}}"#) + "\n"
    }

    /// A `bench mix` output: bulk reads with the breakdown steps, and a Table 1 mix.
    pub fn mix_text() -> String {
        let bulk = r#"{"bench":"mix","workload":"bulk","direction":"from_slow","threads":1,"table1":false,"mean_size":262144,"gib_s":[["cpu",4.0],["engine",2.0],["default",4.0],["tuned",5.0],["fixed",4.8],["limit",3.0],["thresholds",4.5]],"cpu_s_per_gib":[["cpu",0.25],["engine",0.5],["default",0.3],["tuned",0.2],["fixed",0.2],["limit",0.4],["thresholds",0.2]],"tuned_vs_cpu":1.25,"tuned_vs_engine":2.5,"tuned_vs_default":1.25,"tuned_vs_fixed":1.04,"grid":null}"#;
        let tpcc = r#"{"bench":"mix","workload":"tpcc","direction":"to_slow","threads":1,"table1":true,"mean_size":24576,"gib_s":[["cpu",2.0],["engine",1.0],["default",2.0],["tuned",2.0]],"cpu_s_per_gib":[["cpu",0.5],["engine",0.9],["default",0.5],["tuned",0.5]],"tuned_vs_cpu":1.0,"tuned_vs_engine":2.0,"tuned_vs_default":1.0,"grid":null}"#;
        format!(
            "{bulk}\n{tpcc}\n{{\"summary\":true,\"bench\":\"mix\",\"profile\":\"p\",\"setup\":{SETUP}}}\n"
        )
    }

    /// A `tune` output: thresholds 64 KiB, M = 2, a sweep, and scaling to 2 callers.
    pub fn tune_text() -> String {
        use switchyard_mover::config::Thresholds;
        use switchyard_mover::profile::{self, Tuned, NEVER};
        let setup: Setup = serde_json::from_str(SETUP).unwrap();
        let profile = Profile {
            version: profile::PROFILE_VERSION,
            machine: setup.machine,
            engine: setup.engine,
            measured: profile::Measured {
                unix_time: setup.unix_time,
                seconds: 7.0,
                quick: true,
            },
            tuned: Tuned {
                thresholds: Thresholds::all(65536),
                concurrency_limit: 2,
                split_min_bytes: 65536,
                cpu_writers: 0,
                nt_threshold: NEVER,
                shifted_min: 1024,
                undecided: Vec::new(),
            },
            bins: Vec::new(),
            startup: Vec::new(),
        };
        let sweep: Vec<Value> = ["to_slow", "from_slow"]
            .into_iter()
            .flat_map(|d| {
                [(4096, 0.5), (65536, 1.25)].map(|(size, ratio)| {
                    serde_json::json!({"direction": d, "aligned": true, "size": size,
                        "cpu_gib_s": 4.0, "offload_gib_s": 4.0 * ratio, "ratio": ratio,
                        "refined": false})
                })
            })
            .collect();
        let scale = serde_json::json!([{"threads": 1, "gib_s": 2.0}, {"threads": 2, "gib_s": 3.0}]);
        serde_json::json!({
            "tune": true,
            "profile": profile,
            "measurements": {"sweep": sweep, "engine_scaling": scale, "writer_scaling": scale, "nt": []},
            "media": setup.media,
        })
        .to_string()
    }

    pub fn file(text: &str) -> tempfile::NamedTempFile {
        let f = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(f.path(), text).unwrap();
        f
    }

    fn err(r: anyhow::Result<impl std::fmt::Debug>) -> String {
        format!("{:#}", r.unwrap_err())
    }

    #[test]
    fn copy_and_mix_outputs_are_read_with_their_setup() {
        let c = copy(file(&copy_text()).path()).unwrap();
        assert_eq!(c.points.len(), 16);
        assert_eq!(c.setup.machine.cpu, "Test CPU");
        assert_eq!(c.setup.media.fs, "tmpfs");
        assert_eq!(
            c.point("engine", "from_slow", 65536, 2).unwrap().p50_us,
            48.0
        );
        let m = mix(file(&mix_text()).path()).unwrap();
        assert_eq!(m.cases.len(), 2);
        assert_eq!(m.cases[0].gib_s("limit"), Some(3.0));
        assert_eq!(m.cases[1].gib_s("limit"), None);
        assert_eq!(m.cases[1].cpu_s_per_gib("engine"), Some(0.9));
    }

    #[test]
    fn tune_output_is_read_with_the_setup_its_profile_names() {
        let t = tune(file(&tune_text()).path()).unwrap();
        assert_eq!(t.profile.tuned.concurrency_limit, 2);
        assert_eq!(t.measurements.sweep.len(), 4);
        assert_eq!(t.measurements.engine_scaling[1].gib_s, 3.0);
        assert_eq!(t.setup, serde_json::from_str::<Setup>(SETUP).unwrap());
        let old = tune_text().replace(",\"media\":", ",\"old_media\":");
        assert!(err(tune(file(&old).path())).contains("older switchyard"));
        let twice = tune_text() + "\n" + &tune_text();
        assert!(err(tune(file(&twice).path())).contains("a second object"));
    }

    #[test]
    fn pretty_printed_records_are_read_too() {
        let pretty: String = copy_text()
            .lines()
            .map(|l| {
                let v: Value = serde_json::from_str(l).unwrap();
                serde_json::to_string_pretty(&v).unwrap() + "\n"
            })
            .collect();
        assert_eq!(copy(file(&pretty).path()).unwrap().points.len(), 16);
    }

    #[test]
    fn bad_inputs_say_what_is_wrong_and_where() {
        assert!(err(copy(file("").path())).contains("empty"));
        let e = err(copy(file(&mix_text()).path()));
        assert!(e.contains("bench mix") && e.contains("--mix"), "{e}");
        let e = err(tune(file(&copy_text()).path()));
        assert!(e.contains("--copy"), "{e}");
        let e = err(copy(
            file("{\"path\":\"cpu\",\"direction\":\"to_slow\"}\n{oops").path(),
        ));
        assert!(e.contains("line 2") && e.contains("not JSON"), "{e}");
        let e = err(copy(file("{\"hello\":1}").path()));
        assert!(e.contains("not a record"), "{e}");
        // Cut short: the summary is missing.
        let text = copy_text();
        let cut: String = text.lines().take(3).map(|l| l.to_string() + "\n").collect();
        let e = err(copy(file(&cut).path()));
        assert!(e.contains("did not finish"), "{e}");
        // A record missing a field names the line and the field.
        let broken = text.replacen("\"p50_us\":1,", "", 1);
        let e = err(copy(file(&broken).path()));
        assert!(e.contains("line 1") && e.contains("p50_us"), "{e}");
        // An older summary without the setup.
        let old = text.replace(&format!(",\"setup\":{SETUP}"), "");
        let e = err(copy(file(&old).path()));
        assert!(e.contains("older switchyard"), "{e}");
    }
}
