//! Inputs kept from fuzzing (`fuzz/regressions/`, one file each) and a few edge cases,
//! replayed through the checks the fuzz target makes.

use ipoib_wire::check::all_parsers;
use std::fs;

#[test]
fn edge_cases_pass_the_checks() {
    for len in 0..64 {
        all_parsers(&vec![0u8; len]);
        all_parsers(&vec![0xffu8; len]);
    }
}

#[test]
fn kept_fuzz_inputs_pass_the_checks() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/fuzz/regressions");
    for entry in fs::read_dir(dir).expect("regressions folder") {
        let path = entry.expect("entry").path();
        if path.extension().is_some_and(|e| e == "md") {
            continue;
        }
        all_parsers(&fs::read(&path).expect("readable input"));
    }
}
