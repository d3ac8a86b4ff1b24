// CurveZMQ key files (wire-format.md §9): written by tunectl keygen, read by
// the host, tunectl and workers, in czmq's certificate format.
#include "tunehost/protocol/keys.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "test_util.h"

namespace tunehost::protocol {
namespace {

namespace fs = std::filesystem;

class KeysTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("tunehost-keys-test-" + std::to_string(getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  static unsigned Mode(const fs::path& p) {
    struct stat sb {};
    stat(p.c_str(), &sb);
    return sb.st_mode & 0777;
  }
  static void Write(const fs::path& p, const std::string& text, unsigned mode) {
    std::ofstream(p) << text;
    chmod(p.c_str(), mode);
  }

  fs::path dir_;
};

TEST_F(KeysTest, EveryFolderMadeForAKeyIsPrivateWhateverTheUmask) {
  // keygen me --dir ~/hpo-keys/admins with ~/hpo-keys missing too: a 0777
  // parent would let anyone swap the folder for one holding their own key.
  const mode_t old = umask(0);
  KeyPair keys;
  ASSERT_OK(GenerateKeyPair(&keys));
  Status st = WriteKeyPair(dir_ / "keys" / "admins", "alice", keys);
  umask(old);
  ASSERT_OK(st);
  for (const fs::path& d : {dir_, dir_ / "keys", dir_ / "keys" / "admins"}) {
    EXPECT_EQ(Mode(d), 0700u) << d;
    EXPECT_OK(CheckTrustedPath(d));
  }
  // A folder that was there is left as it was.
  fs::create_directories(dir_ / "shared");
  chmod((dir_ / "shared").c_str(), 0755);
  ASSERT_OK(MakePrivateDirectories(dir_ / "shared" / "a" / "b"));
  EXPECT_EQ(Mode(dir_ / "shared"), 0755u);
  EXPECT_EQ(Mode(dir_ / "shared" / "a"), 0700u);
  EXPECT_EQ(Mode(dir_ / "shared" / "a" / "b"), 0700u);
}

TEST_F(KeysTest, APathOthersMayChangeIsNotTrusted) {
  ASSERT_OK(MakePrivateDirectories(dir_));
  Write(dir_ / "host.json", "{}", 0600);
  EXPECT_OK(CheckTrustedPath(dir_ / "host.json"));
  chmod((dir_ / "host.json").c_str(), 0620);
  Status st = CheckTrustedPath(dir_ / "host.json");
  EXPECT_EQ(st.code(), Status::Code::kBadState);
  EXPECT_NE(st.message().find("permissions 0620"), std::string::npos) << st.message();
  chmod(dir_.c_str(), 0777);
  EXPECT_NE(CheckTrustedPath(dir_).message().find("chmod go-w"), std::string::npos);
  chmod(dir_.c_str(), 0700);
  if (geteuid() == 0) {
    ASSERT_EQ(chown(dir_.c_str(), 65534, 65534), 0);
    EXPECT_NE(CheckTrustedPath(dir_).message().find("belongs to user id 65534"),
              std::string::npos);
    ASSERT_EQ(chown(dir_.c_str(), 0, 0), 0);
  }
  EXPECT_EQ(CheckTrustedPath(dir_ / "missing").code(), Status::Code::kNotFound);
}

TEST_F(KeysTest, AWrittenPairReadsBackWithPrivateSecretWhateverTheUmask) {
  const mode_t old = umask(0);
  KeyPair keys;
  ASSERT_OK(GenerateKeyPair(&keys));
  EXPECT_TRUE(IsZ85Key(keys.public_key));
  EXPECT_TRUE(IsZ85Key(keys.secret_key));
  Status st = WriteKeyPair(dir_, "alice", keys);
  umask(old);
  ASSERT_OK(st);
  EXPECT_EQ(Mode(dir_ / "alice.key_secret"), 0600u);
  EXPECT_EQ(Mode(dir_ / "alice.key"), 0644u);
  EXPECT_EQ(Mode(dir_), 0700u);
  KeyPair secret, pub;
  ASSERT_OK(ReadKeyFile(dir_ / "alice.key_secret", true, &secret));
  EXPECT_EQ(secret.public_key, keys.public_key);
  EXPECT_EQ(secret.secret_key, keys.secret_key);
  ASSERT_OK(ReadKeyFile(dir_ / "alice.key", false, &pub));
  EXPECT_EQ(pub.public_key, keys.public_key);
  EXPECT_TRUE(pub.secret_key.empty());
  std::string text;
  std::getline(std::ifstream(dir_ / "alice.key"), text, '\0');
  EXPECT_EQ(text.find(keys.secret_key), std::string::npos) << "the public file holds no secret";
}

TEST_F(KeysTest, NeverOverwritesAKeyAndRefusesNamesThatAreNotFileNames) {
  KeyPair keys;
  ASSERT_OK(GenerateKeyPair(&keys));
  ASSERT_OK(WriteKeyPair(dir_, "bob", keys));
  KeyPair other;
  ASSERT_OK(GenerateKeyPair(&other));
  Status st = WriteKeyPair(dir_, "bob", other);
  EXPECT_EQ(st.code(), Status::Code::kBadState);
  EXPECT_NE(st.message().find("already exists"), std::string::npos);
  KeyPair again;
  ASSERT_OK(ReadKeyFile(dir_ / "bob.key_secret", true, &again));
  EXPECT_EQ(again.secret_key, keys.secret_key);
  for (const char* name : {"", ".", "..", "a/b", "../escape"}) {
    EXPECT_EQ(WriteKeyPair(dir_, name, keys).code(), Status::Code::kBadField) << name;
  }
}

TEST_F(KeysTest, ASecretOthersMayReadIsRefusedAsSshDoes) {
  KeyPair keys;
  ASSERT_OK(GenerateKeyPair(&keys));
  ASSERT_OK(WriteKeyPair(dir_, "carol", keys));
  const fs::path secret = dir_ / "carol.key_secret";
  for (unsigned mode : {0644u, 0640u, 0604u, 0660u}) {
    chmod(secret.c_str(), mode);
    KeyPair out;
    Status st = ReadKeyFile(secret, true, &out);
    EXPECT_EQ(st.code(), Status::Code::kBadState) << mode;
    EXPECT_NE(st.message().find("chmod 600"), std::string::npos) << st.message();
    EXPECT_NE(st.message().find(secret.string()), std::string::npos);
  }
  chmod(secret.c_str(), 0400);
  KeyPair out;
  EXPECT_OK(ReadKeyFile(secret, true, &out));
}

TEST_F(KeysTest, BrokenCertificatesAreRefusedNamingTheFile) {
  fs::create_directories(dir_);
  KeyPair keys, other;
  ASSERT_OK(GenerateKeyPair(&keys));
  ASSERT_OK(GenerateKeyPair(&other));
  const struct {
    const char* name;
    std::string text;
    bool need_secret;
    const char* says;
  } cases[] = {
      {"empty", "", false, "no valid public-key"},
      {"short", "curve\n    public-key = \"abc\"\n", false, "no valid public-key"},
      {"not-z85", "    public-key = \"" + std::string(40, '"') + "\"\n", false, "public-key"},
      {"public-only", "    public-key = \"" + keys.public_key + "\"\n", true,
       "give the .key_secret file"},
      {"mismatched",
       "    public-key = \"" + keys.public_key + "\"\n    secret-key = \"" + other.secret_key +
           "\"\n",
       true, "does not belong"},
  };
  for (const auto& c : cases) {
    const fs::path file = dir_ / c.name;
    Write(file, c.text, 0600);
    KeyPair out;
    Status st = ReadKeyFile(file, c.need_secret, &out);
    EXPECT_FALSE(st.ok()) << c.name;
    EXPECT_NE(st.message().find(c.says), std::string::npos) << c.name << ": " << st.message();
    EXPECT_NE(st.message().find(file.string()), std::string::npos) << st.message();
  }
  KeyPair out;
  EXPECT_EQ(ReadKeyFile(dir_ / "missing", false, &out).code(), Status::Code::kNotFound);
  EXPECT_EQ(ReadKeyFile(dir_, false, &out).code(), Status::Code::kBadField) << "a directory";
}

TEST_F(KeysTest, ReadsCertificatesWrittenByPyzmq) {
  // What zmq.auth.create_certificates writes (czmq's format, with metadata).
  fs::create_directories(dir_);
  KeyPair keys;
  ASSERT_OK(GenerateKeyPair(&keys));
  Write(dir_ / "py.key_secret",
        "#   ****  Generated on 2026-11-25 by pyzmq  ****\n#   ZeroMQ CURVE **Secret** "
        "Certificate\n#   DO NOT PROVIDE THIS FILE TO OTHER USERS nor change its "
        "permissions.\n\nmetadata\ncurve\n    public-key = \"" +
            keys.public_key + "\"\n    secret-key = \"" + keys.secret_key + "\"\n",
        0600);
  KeyPair out;
  ASSERT_OK(ReadKeyFile(dir_ / "py.key_secret", true, &out));
  EXPECT_EQ(out.secret_key, keys.secret_key);
}

TEST(Z85Test, KeysConvertBothWaysAndOnlyKeysAreKeys) {
  KeyPair keys;
  ASSERT_OK(GenerateKeyPair(&keys));
  const std::string bytes = Z85KeyBytes(keys.public_key);
  ASSERT_EQ(bytes.size(), 32u);
  EXPECT_EQ(Z85KeyText(bytes), keys.public_key);
  EXPECT_FALSE(IsZ85Key(""));
  EXPECT_FALSE(IsZ85Key(keys.public_key.substr(1)));
  EXPECT_FALSE(IsZ85Key(std::string(40, ' ')));
  EXPECT_EQ(Z85KeyText("short"), "");
}

}  // namespace
}  // namespace tunehost::protocol
