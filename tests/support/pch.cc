// The translation unit the suites' precompiled header is built with (tests/CMakeLists.txt):
// it has no code of its own.
