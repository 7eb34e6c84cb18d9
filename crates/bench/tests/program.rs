//! The `switchyard-bench` program: its commands are there and run (the benchmarks
//! themselves are tested through `switchyard bench`, in the product's tests).

use assert_cmd::Command;
use predicates::prelude::*;
use predicates::str::contains;

fn program() -> Command {
    Command::new(env!("CARGO_BIN_EXE_switchyard-bench"))
}

#[test]
fn the_program_has_the_benchmarks_the_crash_harness_and_the_report() {
    program().arg("--help").assert().success().stdout(
        contains("bench")
            .and(contains("crashtest"))
            .and(contains("report")),
    );
    program()
        .args(["bench", "decide", "--batches", "2", "--per-batch", "100"])
        .assert()
        .success()
        .stdout(contains("ns median per decision"));
    program()
        .args(["report", "--copy", "/nonexistent/copy.json"])
        .assert()
        .failure()
        .stderr(contains("/nonexistent/copy.json"));
}
