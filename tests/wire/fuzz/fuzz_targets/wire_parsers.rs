//! Any bytes through every wire parser (see `ipoib_wire::check`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    ipoib_wire::check::all_parsers(data);
});
