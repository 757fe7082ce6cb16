// The object that carries the benchmark programs' precompiled header (CMakeLists.txt,
// odafs_bench_pch): bench/bench_util.h and what it includes.
#include "bench/bench_util.h"
