// Child processes for omni-launch and omni-ctl: srun steps and short helper commands
// (scontrol, squeue).
//
// omni-launch is multithreaded (the coordinator and ZeroMQ run threads), so children are
// started with posix_spawn and an explicit environment array: nothing unsafe runs between
// fork and exec, and the launcher's own environment is never modified.
#ifndef OMNI_LAUNCHER_SLURM_PROC_H
#define OMNI_LAUNCHER_SLURM_PROC_H

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "omni/result.h"

namespace omni::launcher {

// The current environment with `set` applied (added or replaced) and the names in `remove`
// left out, as NAME=VALUE strings.
std::vector<std::string> environment_with(const std::map<std::string, std::string> &set,
                                          const std::vector<std::string> &remove = {});

// Starts argv[0] (searched in PATH) with `env`; stdin is /dev/null, stdout and stderr are
// inherited (Slurm collects them in the batch step's output). Returns the pid.
Result<pid_t> spawn(const std::vector<std::string> &argv, const std::vector<std::string> &env);

// The same with stdout and stderr written to the file `path` (created 0600, or truncated).
Result<pid_t> spawn_to_file(const std::vector<std::string> &argv, const std::vector<std::string> &env,
                            const std::string &path);
// Non-blocking: the child's wait status if it has ended (and is now reaped).
std::optional<int> try_reap(pid_t pid);
// The exit code a shell would report: the exit status, or 128+signal.
int exit_code_of(int wait_status);

// Runs a short command and returns its stdout (at most `max_bytes`). Fails if it does not
// exit 0 within `timeout_ms` (it is killed then), naming the command. The command gets this
// process's environment without the variables named in `unset`, with `set` applied.
Result<std::string> run_capture(const std::vector<std::string> &argv, std::int64_t timeout_ms,
                                std::size_t max_bytes = 1 << 20,
                                const std::vector<std::string> &unset = {},
                                const std::map<std::string, std::string> &set = {});

// Path of the running executable (/proc/self/exe), for the per-task shim.
Result<std::string> self_executable();

}  // namespace omni::launcher

#endif
