// omni-ctl --job J; see ctl/remote.h.
#include "ctl/remote.h"

#include "coord/secret.h"

namespace omni::launcher {

Result<std::vector<std::string>> remote_argv(const RemoteCall &c) {
    if (c.caller_uid != c.job_uid && c.caller_uid != 0)
        return make_error("job " + std::to_string(c.job_id) + " belongs to " + c.job_user + " (uid " +
                          std::to_string(c.job_uid) + "): only its owner and root may ask its coordinator");
    std::vector<std::string> argv;
    if (c.caller_uid != c.job_uid) argv = {"runuser", "-u", c.job_user, "--"};
    for (const std::string &w :
         {std::string("srun"), "--jobid=" + std::to_string(c.job_id), std::string("--overlap"),
          std::string("--nodes=1"), std::string("--ntasks=1"), "--nodelist=" + c.batch_host,
          std::string("--job-name=omni-ctl"), std::string("--quiet"), c.self,
          std::string(kPrintCoordinatorOption)})
        argv.push_back(w);
    argv.push_back("--job-dir");
    argv.push_back(default_job_dir(c.job_uid, c.cluster, c.job_id));
    return argv;
}

Result<std::pair<std::string, std::string>> parse_printed_coordinator(const std::string &out) {
    auto nl = out.find('\n');
    if (nl == std::string::npos || nl == 0 || out.size() < nl + 3 || out.back() != '\n' ||
        out.find('\n', nl + 1) != out.size() - 1)
        return make_error("the job's step printed no coordinator (expected two lines)");
    return std::make_pair(out.substr(0, nl), out.substr(nl + 1, out.size() - nl - 2));
}

}  // namespace omni::launcher
