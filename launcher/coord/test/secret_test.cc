// Secret generation and comparison, the private directory and its files.
#include <gtest/gtest.h>

#include <cstdlib>
#include <map>

#include <sys/stat.h>
#include <unistd.h>

#include "coord/secret.h"

using namespace omni::launcher;
using omni::Result;

namespace {

struct TempDir {
    std::string path;
    TempDir() {
        char tmpl[] = "/tmp/omni-secret-test.XXXXXX";
        path = ::mkdtemp(tmpl);
    }
    ~TempDir() { std::system(("rm -rf '" + path + "'").c_str()); }
};

std::map<std::string, std::string> g_env;
const char *fake_env(const char *name) {
    auto it = g_env.find(name);
    return it == g_env.end() ? nullptr : it->second.c_str();
}

mode_t mode_of(const std::string &p) {
    struct stat st;
    EXPECT_EQ(::stat(p.c_str(), &st), 0) << p;
    return st.st_mode & 07777;
}

}  // namespace

TEST(Secret, GeneratedSecretsAreHexAndDiffer) {
    auto a = generate_secret(), b = generate_secret();
    ASSERT_TRUE(a && b);
    EXPECT_EQ(a.value().size(), 64u);
    EXPECT_TRUE(check_secret_format(a.value()));
    EXPECT_NE(a.value(), b.value());
    EXPECT_FALSE(check_secret_format(std::string(63, 'a')));
    EXPECT_FALSE(check_secret_format(std::string(64, 'A')));  // lower case only
    EXPECT_FALSE(check_secret_format(std::string(64, 'g')));
}

TEST(Secret, Comparison) {
    std::string s(64, 'a');
    EXPECT_TRUE(secrets_equal(s, s));
    std::string t = s;
    t[63] = 'b';
    EXPECT_FALSE(secrets_equal(s, t));
    t = s;
    t[0] = 'b';
    EXPECT_FALSE(secrets_equal(s, t));
    EXPECT_FALSE(secrets_equal(s, s.substr(0, 63)));
    EXPECT_FALSE(secrets_equal("", s));
}

TEST(PrivateDir, CreatesAndChecks) {
    TempDir t;
    std::string dir = t.path + "/a/b";
    bool created = false;
    ASSERT_TRUE(ensure_private_dir(dir, &created));
    EXPECT_TRUE(created);
    EXPECT_EQ(mode_of(dir), 0700u);
    EXPECT_EQ(mode_of(t.path + "/a"), 0700u);
    ASSERT_TRUE(ensure_private_dir(dir, &created));  // existing and fine
    EXPECT_FALSE(created);
    // Made by someone else just before: not ours to remove.
    ASSERT_EQ(::mkdir((dir + "/c").c_str(), 0700), 0);
    created = true;
    ASSERT_TRUE(ensure_private_dir(dir + "/c", &created));
    EXPECT_FALSE(created);
    ASSERT_EQ(::chmod(dir.c_str(), 0750), 0);
    created = true;
    auto st = ensure_private_dir(dir, &created);
    ASSERT_FALSE(st);
    EXPECT_FALSE(created);
    EXPECT_NE(st.error().find("group or others"), std::string::npos) << st.error();
    ASSERT_EQ(::chmod(dir.c_str(), 0700), 0);
    // A parent that others may write to could swap the directory.
    ASSERT_EQ(::chmod((t.path + "/a").c_str(), 0777), 0);
    EXPECT_FALSE(ensure_private_dir(dir));
    ASSERT_EQ(::chmod((t.path + "/a").c_str(), 0700), 0);
    ASSERT_EQ(::symlink(dir.c_str(), (t.path + "/link").c_str()), 0);
    EXPECT_FALSE(ensure_private_dir(t.path + "/link"));
    EXPECT_FALSE(ensure_private_dir("relative/dir"));
}

TEST(PrivateDir, FilesAreWrittenPrivateAndReadStrictly) {
    TempDir t;
    std::string dir = t.path + "/job";
    ASSERT_TRUE(write_private_file(dir, "secret", "abc\n"));
    EXPECT_EQ(mode_of(dir + "/secret"), 0600u);
    auto r = read_private_file(dir + "/secret");
    ASSERT_TRUE(r) << r.error();
    EXPECT_EQ(r.value(), "abc");  // trailing newline removed
    ASSERT_TRUE(write_private_file(dir, "secret", "replaced"));
    EXPECT_EQ(read_private_file(dir + "/secret").value(), "replaced");
    EXPECT_FALSE(read_private_file(dir + "/secret", 4));  // too long
    ASSERT_EQ(::chmod((dir + "/secret").c_str(), 0640), 0);
    auto bad = read_private_file(dir + "/secret");
    ASSERT_FALSE(bad);
    EXPECT_NE(bad.error().find("group or others"), std::string::npos) << bad.error();
    ASSERT_EQ(::chmod((dir + "/secret").c_str(), 0600), 0);
    ASSERT_EQ(::symlink((dir + "/secret").c_str(), (dir + "/alias").c_str()), 0);
    EXPECT_FALSE(read_private_file(dir + "/alias"));  // O_NOFOLLOW
    EXPECT_FALSE(read_private_file(dir + "/missing"));
}

// What is not ours, or not what it should be, is refused by name: a directory or a secret
// file owned by another user (someone who could have planted or could read the secret), a
// file where the directory should be, a directory where the file should be.
TEST(PrivateDir, OtherOwnersAndWrongKindsAreRefused) {
    TempDir t;
    const std::string dir = t.path + "/job";
    ASSERT_TRUE(write_private_file(dir, "secret", "abc"));
    auto not_dir = ensure_private_dir(dir + "/secret");
    ASSERT_FALSE(not_dir);
    EXPECT_EQ(not_dir.error(), dir + "/secret: not a directory");
    auto not_file = read_private_file(dir);
    ASSERT_FALSE(not_file);
    EXPECT_NE(not_file.error().find(dir + ": not a regular file"), std::string::npos) << not_file.error();
    if (::geteuid() != 0) GTEST_SKIP() << "giving files to another user (chown) needs root";
    const std::string want = "owned by uid 65534, not by uid 0";
    ASSERT_EQ(::chown((dir + "/secret").c_str(), 65534, 65534), 0);
    auto file = read_private_file(dir + "/secret");
    ASSERT_FALSE(file);
    EXPECT_EQ(file.error(), dir + "/secret: " + want);
    ASSERT_EQ(::chown(dir.c_str(), 65534, 65534), 0);
    auto d = ensure_private_dir(dir);
    ASSERT_FALSE(d);
    EXPECT_EQ(d.error(), dir + ": " + want);
}

TEST(PrivateDir, JobDirFromEnvironment) {
    g_env.clear();
    EXPECT_FALSE(job_dir_from_env(fake_env));
    g_env["SLURM_JOB_ID"] = "4242";
    EXPECT_EQ(job_dir_from_env(fake_env).value(),
              "/tmp/omni-" + std::to_string(::geteuid()) + "/job-4242");
    g_env["SLURM_CLUSTER_NAME"] = "site-a";
    EXPECT_EQ(job_dir_from_env(fake_env).value(),
              "/tmp/omni-" + std::to_string(::geteuid()) + "/job-site-a-4242");
    g_env["SLURM_CLUSTER_NAME"] = "../x";
    auto bad = job_dir_from_env(fake_env);
    ASSERT_FALSE(bad);
    EXPECT_EQ(bad.error(), "SLURM_CLUSTER_NAME: '../x': expected 1..64 letters, digits, '_', '-' or '.'");
    g_env.erase("SLURM_CLUSTER_NAME");
    g_env["SLURM_JOB_ID"] = "42x";
    EXPECT_FALSE(job_dir_from_env(fake_env));
    g_env["OMNI_JOB_DIR"] = "/scratch/j1";
    EXPECT_EQ(job_dir_from_env(fake_env).value(), "/scratch/j1");
    g_env["OMNI_JOB_DIR"] = "rel";
    EXPECT_FALSE(job_dir_from_env(fake_env));
}

TEST(Locate, EnvironmentThenJobDirectory) {
    TempDir t;
    const std::string secret(64, 'd'), other(64, 'e');
    std::string dir = t.path + "/job-7";
    ASSERT_TRUE(publish_job_files(dir, secret, "tcp://127.0.0.1:4000"));
    EXPECT_EQ(mode_of(dir), 0700u);
    EXPECT_EQ(mode_of(dir + "/secret"), 0600u);
    EXPECT_EQ(mode_of(dir + "/coordinator"), 0600u);
    EXPECT_FALSE(publish_job_files(dir, "nothex", "tcp://127.0.0.1:4000"));
    EXPECT_FALSE(publish_job_files(dir, secret, "tcp://0.0.0.0:4000"));

    g_env.clear();
    EXPECT_FALSE(locate_coordinator("", "", fake_env));  // nothing to go on
    g_env["OMNI_JOB_DIR"] = dir;
    auto a = locate_coordinator("", "", fake_env);
    ASSERT_TRUE(a) << a.error();
    EXPECT_EQ(a.value().endpoint, "tcp://127.0.0.1:4000");
    EXPECT_EQ(a.value().secret, secret);
    // The environment wins over the directory ...
    g_env["OMNI_COORD_ADDR"] = "tcp://127.0.0.1:5000";
    g_env["OMNI_COORD_SECRET"] = other;
    auto b = locate_coordinator("", "", fake_env);
    ASSERT_TRUE(b) << b.error();
    EXPECT_EQ(b.value().endpoint, "tcp://127.0.0.1:5000");
    EXPECT_EQ(b.value().secret, other);
    // ... an explicit directory wins over the environment, --address over everything.
    auto c = locate_coordinator("tcp://127.0.0.1:6000", dir, fake_env);
    ASSERT_TRUE(c) << c.error();
    EXPECT_EQ(c.value().endpoint, "tcp://127.0.0.1:6000");
    EXPECT_EQ(c.value().secret, secret);
    // Malformed values are refused, not passed on.
    g_env["OMNI_COORD_SECRET"] = "short";
    EXPECT_FALSE(locate_coordinator("", "", fake_env));
    g_env["OMNI_COORD_SECRET"] = other;
    g_env["OMNI_COORD_ADDR"] = "tcp://example.org:1";
    EXPECT_FALSE(locate_coordinator("", "", fake_env));
    g_env.clear();
}
