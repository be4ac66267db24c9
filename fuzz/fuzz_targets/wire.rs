#![no_main]

use meshdns::testing::fuzz as targets;

libfuzzer_sys::fuzz_target!(|data: &[u8]| targets::target("wire")(data));
