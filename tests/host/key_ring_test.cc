// The host's keys and roles (wire-format.md §9): the keys directory, which
// role may use which socket and request, workers tied to their key, and
// which endpoints count as loopback.
#include "tunehost/host/key_ring.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <string>

#include "test_util.h"

namespace tunehost::host {
namespace {

namespace fs = std::filesystem;
namespace p = tunehost::protocol;

class KeyRingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("tunehost-keyring-test-" + std::to_string(getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  p::KeyPair Make(const fs::path& dir, const std::string& name) {
    p::KeyPair keys;
    EXPECT_OK(p::GenerateKeyPair(&keys));
    EXPECT_OK(p::WriteKeyPair(dir, name, keys));
    return keys;
  }

  fs::path dir_;
};

TEST_F(KeyRingTest, LoadsTheServerPairAndEveryRoleByFolder) {
  const p::KeyPair server = Make(dir_, "server");
  const p::KeyPair node7 = Make(dir_ / "workers", "node7");
  const p::KeyPair dash = Make(dir_ / "viewers", "dash");
  const p::KeyPair alice = Make(dir_ / "admins", "alice");
  KeyRing ring;
  ASSERT_OK(KeyRing::Load(dir_, &ring));
  EXPECT_EQ(ring.server().secret_key, server.secret_key);
  EXPECT_EQ(ring.count(Role::kWorker), 1u);
  EXPECT_EQ(ring.count(Role::kViewer), 1u);
  EXPECT_EQ(ring.count(Role::kAdmin), 1u);
  const KeyHolder* w = ring.Find(p::Z85KeyBytes(node7.public_key));
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->UserId(), "worker:node7");
  EXPECT_EQ(ring.Find(p::Z85KeyBytes(dash.public_key))->UserId(), "viewer:dash");
  EXPECT_EQ(ring.Find(p::Z85KeyBytes(alice.public_key))->UserId(), "admin:alice");
  EXPECT_EQ(ring.Find(p::Z85KeyBytes(server.public_key)), nullptr) << "the host's own key";
  EXPECT_EQ(RoleOfUserId("viewer:dash"), Role::kViewer);
  EXPECT_EQ(RoleOfUserId(""), std::nullopt);
  EXPECT_EQ(RoleOfUserId("root:x"), std::nullopt);
}

TEST_F(KeyRingTest, RefusesAMissingOrLooseServerKeyAndAKeyInTwoRoles) {
  KeyRing ring;
  Status st = KeyRing::Load(dir_, &ring);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("tunectl keygen server"), std::string::npos) << st.message();
  Make(dir_, "server");
  fs::permissions(dir_ / "server.key_secret", fs::perms::group_read, fs::perm_options::add);
  st = KeyRing::Load(dir_, &ring);
  EXPECT_NE(st.message().find("chmod 600"), std::string::npos) << st.message();
  fs::permissions(dir_ / "server.key_secret", fs::perms::group_read, fs::perm_options::remove);
  const p::KeyPair both = Make(dir_ / "workers", "both");
  fs::create_directories(dir_ / "admins");
  fs::copy_file(dir_ / "workers" / "both.key", dir_ / "admins" / "both.key");
  st = KeyRing::Load(dir_, &ring);
  EXPECT_EQ(st.code(), Status::Code::kBadState);
  EXPECT_NE(st.message().find("one key has one role"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("admins/both.key"), std::string::npos) << st.message();
}

TEST_F(KeyRingTest, RefusesKeysOthersMayChangeAndTheLocalWorkersName) {
  // Whoever may write to the keys may add an admin or replace the host's
  // own pair: as ssh, refuse anything others may write.
  Make(dir_, "server");
  Make(dir_ / "admins", "alice");
  KeyRing ring;
  ASSERT_OK(KeyRing::Load(dir_, &ring));
  for (const fs::path& path : {dir_, dir_ / "admins", dir_ / "admins" / "alice.key",
                               dir_ / "server.key_secret"}) {
    const fs::perms before = fs::status(path).permissions();
    fs::permissions(path, fs::perms::others_write, fs::perm_options::add);
    Status st = KeyRing::Load(dir_, &ring);
    EXPECT_EQ(st.code(), Status::Code::kBadState) << path;
    EXPECT_NE(st.message().find(path.string()), std::string::npos) << st.message();
    EXPECT_TRUE(st.message().find("chmod go-w") != std::string::npos ||
                st.message().find("chmod 600") != std::string::npos)
        << st.message();
    fs::permissions(path, before, fs::perm_options::replace);
  }
  ASSERT_OK(KeyRing::Load(dir_, &ring));
  if (geteuid() == 0) {
    // Owned by someone else (not root): refused too.
    ASSERT_EQ(chown((dir_ / "admins").c_str(), 65534, 65534), 0);
    Status st = KeyRing::Load(dir_, &ring);
    EXPECT_NE(st.message().find("belongs to user id 65534"), std::string::npos) << st.message();
    ASSERT_EQ(chown((dir_ / "admins").c_str(), 0, 0), 0);
  }
  // A role folder that is a file, and a key named like the local workers'.
  { std::ofstream(dir_ / "viewers") << "x"; }
  Status st = KeyRing::Load(dir_, &ring);
  EXPECT_NE(st.message().find("is not a folder"), std::string::npos) << st.message();
  fs::remove(dir_ / "viewers");
  Make(dir_ / "workers", kLocalWorkersKeyName);
  st = KeyRing::Load(dir_, &ring);
  EXPECT_NE(st.message().find("rename the file"), std::string::npos) << st.message();
}

TEST(RolesTest, EachRoleUsesOnlyItsSocketsAndRequests) {
  EXPECT_TRUE(RoleMaySocket(Role::kWorker, "jobs"));
  EXPECT_TRUE(RoleMaySocket(Role::kWorker, "results"));
  EXPECT_FALSE(RoleMaySocket(Role::kViewer, "jobs")) << "a viewer would take offers";
  EXPECT_FALSE(RoleMaySocket(Role::kViewer, "results"));
  EXPECT_TRUE(RoleMaySocket(Role::kViewer, "control"));
  EXPECT_TRUE(RoleMaySocket(Role::kViewer, "events"));
  EXPECT_TRUE(RoleMaySocket(Role::kAdmin, "jobs"));
  const p::Body queries[] = {p::Ping{}, p::GetStatus{}, p::ListTrials{}, p::GetTrial{},
                             p::GetStatistics{}, p::GetMetrics{}, p::ExportData{},
                             p::ListWorkers{}};
  const p::Body changes[] = {p::Terminate{}, p::KillTrial{}, p::UpdateLimits{},
                             p::ImportData{}, p::AddCustomizedTrialJob{},
                             p::UpdateSearchSpace{}, p::Initialize{}, p::RequestTrialJobs{},
                             p::ReportMetricData{}, p::TrialEnd{}};
  for (const p::Body& b : queries) {
    EXPECT_TRUE(RoleMayRequest(Role::kViewer, b)) << p::TypeCode(b);
    EXPECT_TRUE(RoleMayRequest(Role::kAdmin, b)) << p::TypeCode(b);
    EXPECT_FALSE(RoleMayRequest(Role::kWorker, b)) << p::TypeCode(b);
  }
  for (const p::Body& b : changes) {
    EXPECT_FALSE(RoleMayRequest(Role::kViewer, b)) << p::TypeCode(b);
    EXPECT_TRUE(RoleMayRequest(Role::kAdmin, b)) << p::TypeCode(b);
    EXPECT_FALSE(RoleMayRequest(Role::kWorker, b)) << p::TypeCode(b);
  }
}

TEST(WorkerKeysTest, AWorkerIdBelongsToTheKeyThatUsedItFirst) {
  WorkerKeys keys;
  auto in_use = [](const std::string&) { return true; };
  EXPECT_OK(keys.Check("w1", "worker:node7", in_use));
  EXPECT_OK(keys.Check("w1", "worker:node7", in_use));
  Status st = keys.Check("w1", "worker:intruder", in_use);
  EXPECT_EQ(st.code(), Status::Code::kForbidden);
  EXPECT_NE(st.message().find("worker:node7"), std::string::npos) << st.message();
  EXPECT_EQ(keys.KeyOf("w1"), "worker:node7");
  EXPECT_EQ(keys.KeyOf("w2"), "");
  keys.Tie("w2", "worker:node8");  // a resumed host: from the store
  EXPECT_EQ(keys.Check("w2", "worker:intruder", in_use).code(), Status::Code::kForbidden);
  EXPECT_EQ(WorkerIdOf(p::Heartbeat{"w9", 0, {}}), "w9");
  EXPECT_EQ(WorkerIdOf(p::Ping{}), std::nullopt);
}

TEST(WorkerKeysTest, OneKeyMakingUpIdsCannotKeepOtherKeysOut) {
  // A key sends messages for made-up worker ids until the table is full;
  // ids nobody uses make room for a real worker of another key, and ids in
  // use keep their key.
  WorkerKeys keys;
  std::set<std::string> live = {"real"};
  auto in_use = [&](const std::string& id) { return live.count(id) != 0; };
  ASSERT_OK(keys.Check("real", "worker:a", in_use));
  for (size_t i = 1; i < WorkerKeys::kMaxTies; ++i) {
    ASSERT_OK(keys.Check("fake-" + std::to_string(i), "worker:mallory", in_use));
  }
  EXPECT_OK(keys.Check("node-1", "worker:b", in_use));  // room made of unused ids
  EXPECT_EQ(keys.KeyOf("real"), "worker:a");
  EXPECT_EQ(keys.KeyOf("fake-1"), "") << "an unused id kept its tie";
  EXPECT_EQ(keys.Check("real", "worker:mallory", in_use).code(), Status::Code::kForbidden);
  // Every id in use: the next is refused, naming the limit.
  WorkerKeys full;
  auto all = [](const std::string&) { return true; };
  for (size_t i = 0; i < WorkerKeys::kMaxTies; ++i) {
    ASSERT_OK(full.Check("w" + std::to_string(i), "worker:a", all));
  }
  Status st = full.Check("one-more", "worker:a", all);
  EXPECT_EQ(st.code(), Status::Code::kBadState);
  EXPECT_NE(st.message().find("is the limit"), std::string::npos) << st.message();
}

TEST(LoopbackTest, OnlyThisMachinesAddressesAreLoopback) {
  for (const char* ep : {"tcp://127.0.0.1:5650", "tcp://127.1.2.3:*", "tcp://localhost:9",
                         "tcp://[::1]:5650", "ipc:///tmp/x", "inproc://a"}) {
    EXPECT_TRUE(IsLoopbackEndpoint(ep)) << ep;
  }
  for (const char* ep : {"tcp://0.0.0.0:5650", "tcp://*:5650", "tcp://10.0.0.7:1",
                         "tcp://eth0:5650", "tcp://[::]:5650", "tcp://127.0.0.1.evil.com:1",
                         "tcp://127.0.0.256:1", "tcp://127.0.0.1;10.0.0.1:5", "udp://127.0.0.1:1",
                         "tcp://127.0.0:1", "tcp://[::1:5650"}) {
    EXPECT_FALSE(IsLoopbackEndpoint(ep)) << ep;
  }
}

}  // namespace
}  // namespace tunehost::host
