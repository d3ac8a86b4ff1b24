// The checked-in vectors (protocol/vectors/) against the C++ codec: every valid
// vector decodes to exactly its "expect" (rendered field by field from the
// decoded structs, through the descriptions the codec uses), re-encodes
// byte-identically, and every invalid one fails with its error code.
#include <set>
#include <string>
#include <type_traits>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "test_util.h"
#include "codec_messages.h"
#include "protocol_testing.h"
#include "tunehost/protocol/codec.h"

namespace tunehost::protocol {
namespace {

using nlohmann::json;
using testing::DefaultBody;
using testing::FromHex;
using testing::LoadVectorFile;
using testing::ToHex;

json Id(const ParameterId& id) {
  if (const auto* i = std::get_if<int64_t>(&id)) return *i;
  if (const auto* s = std::get_if<std::string>(&id)) return *s;
  return nullptr;
}

// The decoded body as JSON, written from the struct fields (not from the
// bytes) through the messages' descriptions (protocol/src/codec_messages.h),
// the ones the codec encodes and decodes with: the expectations in
// vectors.json, written from the spec, check both.
class Renderer {
 public:
  template <class T>
  static json Render(const T& body) {
    Renderer r;
    codec_detail::Describe(r, const_cast<T&>(body));  // rendering only reads
    return r.out_;
  }

  template <class... A>
  void Str(std::string_view k, const std::string& s, A&&...) { Set(k, s); }
  void Text(std::string_view k, const std::string& s) { Set(k, s); }
  void OptStr(std::string_view k, const std::optional<std::string>& s) { Set(k, Opt(s)); }
  template <class T, class... A>
  void UInt(std::string_view k, T n, A&&...) { Set(k, n); }
  template <class T, class... A>
  void OptUInt(std::string_view k, const std::optional<T>& n, A&&...) { Set(k, Opt(n)); }
  template <class... A>
  void Int(std::string_view k, int64_t n, A&&...) { Set(k, n); }
  void Float(std::string_view k, double d) { Set(k, d); }
  void OptFloat(std::string_view k, const std::optional<double>& d) { Set(k, Opt(d)); }
  void ParamId(std::string_view k, const ParameterId& id) { Set(k, Id(id)); }
  template <class E, class T>
  void Enum(std::string_view k, E e, const T&) { Set(k, std::string(ToString(e))); }
  template <class E, class T>
  void OptEnum(std::string_view k, const std::optional<E>& e, const T&) {
    Set(k, e ? json(std::string(ToString(*e))) : json(nullptr));
  }
  void Metric(std::string_view k, const protocol::Metric& m) { Set(k, Value(m.raw)); }
  template <class... A>
  void Map(std::string_view k, const Packed& p, A&&...) { Set(k, Value(p)); }
  void Value(std::string_view k, const Packed& p) { Set(k, Value(p)); }
  template <class T, class... A>
  void Sub(std::string_view k, const T& sub, A&&...) { Set(k, Render(sub)); }
  template <class T>
  void OptSub(std::string_view k, const std::optional<T>& sub) {
    Set(k, sub ? Render(*sub) : json(nullptr));
  }
  template <class T, class... A>
  void List(std::string_view k, const std::vector<T>& items, A&&...) {
    json out = json::array();
    for (const T& item : items) out.push_back(Render(item));
    Set(k, out);
  }
  template <class... A>
  void Check(A&&...) {}

 private:
  template <class T>
  static json Opt(const std::optional<T>& v) { return v ? json(*v) : json(nullptr); }
  static json Value(const Packed& p) { return json::parse(PackedToJson(p)); }
  void Set(std::string_view k, json v) { out_[std::string(k)] = std::move(v); }

  json out_ = json::object();
};

// The number the algorithms see for an expected metric value.
double ExpectedScalar(const json& value) {
  return value.is_object() ? value.at("default").get<double>() : value.get<double>();
}

// Metric::scalar must match the metric's value (not only its raw bytes).
void CheckScalars(const Body& body, const json& expect) {
  if (const auto* me = std::get_if<ReportMetricData>(&body)) {
    EXPECT_EQ(me->value.scalar, ExpectedScalar(expect.at("value")));
  }
  if (const auto* fd = std::get_if<ImportData>(&body)) {
    ASSERT_EQ(fd->data.size(), expect.at("data").size());
    for (size_t i = 0; i < fd->data.size(); ++i) {
      EXPECT_EQ(fd->data[i].value.scalar, ExpectedScalar(expect.at("data")[i].at("value")));
    }
  }
}

TEST(VectorsTest, EveryValidVectorDecodesToItsExpectationAndReencodesIdentically) {
  const json vectors = LoadVectorFile("vectors.json");
  ASSERT_GT(vectors.size(), 0u);
  for (const auto& v : vectors) {
    const std::string name = v.at("name");
    SCOPED_TRACE(name);
    const json& expect = v.at("expect");
    Message m;
    ASSERT_OK(Decode(FromHex(v.at("hex")), &m));
    EXPECT_EQ(m.version, expect.at("v").get<uint32_t>());
    EXPECT_EQ(m.type, expect.at("type").get<std::string>());
    EXPECT_EQ(TypeCode(m.body), m.type);
    EXPECT_EQ(m.id, expect.at("id").get<uint64_t>());
    const json rendered = std::visit([](const auto& b) { return Renderer::Render(b); }, m.body);
    EXPECT_EQ(rendered, expect.at("body")) << "rendered: " << rendered.dump();
    CheckScalars(m.body, expect.at("body"));
    const std::string canonical = v.contains("canonical_hex") ? v.at("canonical_hex") : v.at("hex");
    EXPECT_EQ(ToHex(Encode(m)), canonical);
  }
}

TEST(VectorsTest, CoverEveryMessageType) {
  const json vectors = LoadVectorFile("vectors.json");
  std::set<std::string> seen;
  for (const auto& v : vectors) seen.insert(v.at("expect").at("type").get<std::string>());
  for (size_t i = 0; i < std::variant_size_v<Body>; ++i) {
    const Body body = DefaultBody(i);
    EXPECT_TRUE(seen.count(std::string(TypeCode(body)))) << "no vector for " << TypeCode(body);
  }
}

TEST(VectorsTest, EveryInvalidVectorFailsWithItsCode) {
  const json invalid = LoadVectorFile("invalid.json");
  ASSERT_GT(invalid.size(), 0u);
  for (const auto& v : invalid) {
    const std::string name = v.at("name");
    SCOPED_TRACE(name);
    DecodeOptions options;
    if (v.contains("max_message_bytes")) options.max_message_bytes = v.at("max_message_bytes");
    Message m;
    m.id = 777;  // must be reset when the id cannot be read
    const Status st = Decode(FromHex(v.at("hex")), &m, options);
    ASSERT_FALSE(st.ok());
    EXPECT_EQ(st.CodeName(), v.at("error").get<std::string>()) << st.ToString();
    if (v.contains("field")) {
      EXPECT_NE(st.message().find(v.at("field").get<std::string>()), std::string::npos)
          << st.ToString();
    }
    EXPECT_EQ(m.id, v.at("id").get<uint64_t>());
  }
}

}  // namespace
}  // namespace tunehost::protocol
