// The job's figures in Prometheus text format, for node_exporter's textfile collector (which
// reads DIR/*.prom) or any scraper of a file: generation, units, world, step, gradient
// accumulation, throughput, pending grows, generation changes by reason and the last change's
// pause, all from the coordinator's status. omni-launch --metrics-file writes it.
#ifndef OMNI_LAUNCHER_LAUNCH_METRICS_H
#define OMNI_LAUNCHER_LAUNCH_METRICS_H

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "omni/result.h"

namespace omni::launcher {

// The exposition text of one status (status_to_json's object). Every sample carries the label
// job="J" (J > 0: inside a Slurm job). Figures the status does not know yet (the batch
// geometry before the first boundary, the throughput before the second) are left out.
std::string prometheus_text(const nlohmann::json &status, std::uint32_t job_id);

// Replaces `path` with `text` atomically: a temporary file in the same directory, renamed
// over it, so that a reader sees the old file or the new one, never a part. Mode 0644.
Status write_file_atomically(const std::string &path, const std::string &text);

}  // namespace omni::launcher

#endif
