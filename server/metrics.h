// What odafsd's --metrics serves at /metrics: every counter of STATS
// (FileService::counters) and each procedure's call times (CallTimes), in Prometheus' text
// exposition format (version 0.0.4).
//
//   odafs_<counter>_total{export="/srv/a"}   a count since start ("cache.hits": cache_hits)
//   odafs_<gauge>{export="/srv/a"}           a level now (delegations_held, recovery_in_grace)
//   odafs_rpc_*, odafs_cpu_us_*              the whole server's, without an export label
//   odafs_call_seconds_bucket{export=...,procedure="READ",le="0.001"}  and _sum, _count
//
// The names and their meaning are in docs/metrics.md.
#pragma once

#include <string>

#include "server/export_router.h"

namespace odafs::server {

// REQUIRES: router.register_procedures done. Thread-safe; allocates.
std::string render_metrics(const ExportRouter& router);

}  // namespace odafs::server
