// The job's figures in Prometheus text format; see launch/metrics.h.
#include "launch/metrics.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace omni::launcher {
namespace {

// One metric: its HELP and TYPE lines and samples, in the exposition format's order.
class Text {
public:
    explicit Text(std::uint32_t job) : label_(job ? "job=\"" + std::to_string(job) + "\"" : "") {}
    void metric(const char *name, const char *type, const char *help) {
        out_ += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
        name_ = name;
    }
    void sample(double v, const std::string &extra_label = {}) {
        std::string labels = label_;
        if (!extra_label.empty()) labels += (labels.empty() ? "" : ",") + extra_label;
        // The shortest text that reads back as the same double (0.042, not 0.0420...03).
        char num[64];
        for (int digits = 15; digits <= 17; ++digits) {
            std::snprintf(num, sizeof num, "%.*g", digits, v);
            if (std::strtod(num, nullptr) == v) break;
        }
        out_ += name_ + (labels.empty() ? "" : "{" + labels + "}") + " " + num + "\n";
    }
    const std::string &str() const { return out_; }

private:
    std::string label_, name_, out_;
};

bool number(const nlohmann::json &s, const char *key, double &v) {
    auto it = s.find(key);
    if (it == s.end() || !it->is_number()) return false;
    v = it->get<double>();
    return true;
}

}  // namespace

std::string prometheus_text(const nlohmann::json &s, std::uint32_t job_id) {
    Text t(job_id);
    double v = 0;
    struct Gauge {
        const char *key, *name, *help;
    };
    static const Gauge gauges[] = {
        {"generation", "omni_generation", "The job's generation: one more at every membership change."},
        {"units", "omni_units", "Elastic units in the current generation."},
        {"world", "omni_world_size", "Ranks in the current generation (data-parallel size)."},
        {"min_units", "omni_min_units", "The elastic minimum: fewer units stop the job."},
        {"max_units", "omni_max_units", "The elastic maximum."},
        {"last_step", "omni_step", "The last step boundary the ranks passed."},
        {"global_batch", "omni_global_batch", "Samples per optimizer step (B)."},
        {"grad_accum", "omni_grad_accum", "Micro-batches per rank per step: B / (b x world)."},
        {"samples_per_s", "omni_samples_per_second", "Samples trained per second over the last boundaries."},
        {"target_units", "omni_target_units", "The size of a planned change not applied yet."},
    };
    t.metric("omni_up", "gauge", "1 while omni-launch runs the job.");
    t.sample(1);
    for (const auto &g : gauges)
        if (number(s, g.key, v)) {
            t.metric(g.name, "gauge", g.help);
            t.sample(v);
        }
    t.metric("omni_pending_joiners", "gauge", "Ranks waiting to join (a grow in progress).");
    t.sample(double(s.value("pending_joiners", nlohmann::json::array()).size()));
    auto changes = s.find("changes");
    if (changes != s.end() && changes->is_object() && !changes->empty()) {
        t.metric("omni_changes_total", "counter", "Generation changes by reason (formed, planned, lost).");
        for (auto it = changes->begin(); it != changes->end(); ++it)
            if (it->is_number()) t.sample(it->get<double>(), "reason=\"" + it.key() + "\"");
    }
    auto resize = s.find("last_resize");
    if (resize != s.end() && resize->is_object()) {
        t.metric("omni_last_resize_info", "gauge",
                 "1, labelled with the kind of the last resize (planned, preemption, policy, scontrol, lost).");
        t.sample(1, "kind=\"" + resize->value("kind", std::string("unknown")) + "\"");
        if (number(*resize, "step", v)) {
            t.metric("omni_last_resize_step", "gauge", "The step boundary the last resize applied at.");
            t.sample(v);
        }
    }
    auto ckpt = s.find("last_checkpoint");
    if (ckpt != s.end() && ckpt->is_object()) {
        if (number(*ckpt, "step", v)) {
            t.metric("omni_last_checkpoint_step", "gauge", "The step of the last checkpoint a rank reported.");
            t.sample(v);
        }
        if (number(*ckpt, "time", v)) {
            t.metric("omni_last_checkpoint_timestamp_seconds", "gauge",
                     "When the last checkpoint was reported, in seconds since the epoch.");
            t.sample(v);
        }
    }
    if (number(s, "change_pause_ms", v)) {
        t.metric("omni_last_change_pause_seconds", "gauge",
                 "The last change's pause: from the decision until every rank was ready.");
        t.sample(v / 1000.0);
    }
    return t.str();
}

Status write_file_atomically(const std::string &path, const std::string &text) {
    const std::string tmp = path + ".tmp." + std::to_string(::getpid());
    int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd < 0) return make_error(tmp + ": " + std::strerror(errno));
    // Readable by the collector, which runs as another user, whatever this process's umask
    // (fchmod on a file just created by this process does not fail).
    (void)::fchmod(fd, 0644);
    std::size_t done = 0;
    while (done < text.size()) {
        ssize_t n = ::write(fd, text.data() + done, text.size() - done);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
            const std::string why = std::strerror(errno);
            ::close(fd);
            ::unlink(tmp.c_str());
            return make_error(tmp + ": " + why);
        }
        done += static_cast<std::size_t>(n);
    }
    if (::close(fd) != 0 || ::rename(tmp.c_str(), path.c_str()) != 0) {
        const std::string why = std::strerror(errno);
        ::unlink(tmp.c_str());
        return make_error(path + ": " + why);
    }
    return Status::success();
}

}  // namespace omni::launcher
