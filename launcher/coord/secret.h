// The per-job secret and the job's private directory.
//
// Every request to the coordinator carries the secret; only processes of the job can read it:
// omni-launch generates it at start, writes it mode 0600 into a private directory (mode 0700,
// owned by the job's user) and hands it to the ranks through the environment (whose
// /proc/PID/environ is readable by the owner only). omni-ctl, run by the user inside the
// allocation, reads it from the environment or from the directory.
//
// Environment (set by omni-launch for ranks; omni-ctl reads them):
//   OMNI_COORD_ADDR    the coordinator endpoint, "tcp://IPV4:PORT"
//   OMNI_COORD_SECRET  the secret, 64 lowercase hex digits
//   OMNI_JOB_DIR       the private directory; holds "secret" and "coordinator" (the endpoint)
// Without OMNI_JOB_DIR the directory is /tmp/omni-UID/job-SLURM_CLUSTER_NAME-SLURM_JOB_ID.
#ifndef OMNI_LAUNCHER_SECRET_H
#define OMNI_LAUNCHER_SECRET_H

#include <cstdint>
#include <string>
#include <string_view>

#include "omni/result.h"

namespace omni::launcher {

inline constexpr const char *kEnvCoordAddr = "OMNI_COORD_ADDR";
inline constexpr const char *kEnvCoordSecret = "OMNI_COORD_SECRET";
inline constexpr const char *kEnvJobDir = "OMNI_JOB_DIR";
inline constexpr const char *kSecretFile = "secret";
inline constexpr const char *kAddressFile = "coordinator";

// 32 bytes from getrandom(2), as 64 lowercase hex digits.
Result<std::string> generate_secret();
// 64 lowercase hex digits, nothing else.
Status check_secret_format(std::string_view secret);
// Compares in time independent of where the strings differ (no early exit), so response
// timing does not reveal a prefix of the secret.
bool secrets_equal(std::string_view a, std::string_view b);

// Creates `path` mode 0700 (parents too, each 0700 when created here) or accepts an existing
// directory that is owned by the effective user, not a symlink, and has no group/other
// permission bits. Anything else is an error naming the path and the problem. `created`,
// when not null, is set to whether this call made `path` itself (its mkdir succeeded), so a
// caller can remove only a directory it made, with no check-then-act race against another
// process making the same one.
Status ensure_private_dir(const std::string &path, bool *created = nullptr);
// Writes `content` to DIR/NAME mode 0600 atomically (temporary file, fsync, rename).
Status write_private_file(const std::string &dir, const std::string &name,
                          std::string_view content);
// Reads a file that must be a regular file owned by the effective user with no group/other
// permission bits, at most `max_bytes` long. A trailing newline is removed.
Result<std::string> read_private_file(const std::string &path, std::size_t max_bytes = 4096);

// The job's private directory from the environment (see above); `get` is getenv-like.
Result<std::string> job_dir_from_env(const char *(*get)(const char *));
// The default directory of job `job_id` of user `uid` on cluster `cluster` (empty: none):
// /tmp/omni-UID/job-CLUSTER-JOBID, or /tmp/omni-UID/job-JOBID. `cluster` must already be
// checked (job_dir_from_env does so for SLURM_CLUSTER_NAME).
std::string default_job_dir(std::uint32_t uid, const std::string &cluster, std::uint32_t job_id);

// omni-launch's side: writes DIR/secret and DIR/coordinator (mode 0600, DIR mode 0700).
Status publish_job_files(const std::string &dir, const std::string &secret,
                         const std::string &endpoint);

// Where a client finds the coordinator and the secret, first match wins:
//   endpoint: `address` (if not empty); $OMNI_COORD_ADDR unless `dir` is given; DIR/coordinator
//   secret:   $OMNI_COORD_SECRET unless `dir` is given; DIR/secret
// where DIR is `dir` or job_dir_from_env(). An explicit `dir` overrides the environment so
// that a user can address another job of theirs. Both values are validated.
struct CoordinatorLocation {
    std::string endpoint, secret;
};
Result<CoordinatorLocation> locate_coordinator(const std::string &address, const std::string &dir,
                                               const char *(*get)(const char *));

}  // namespace omni::launcher

#endif
