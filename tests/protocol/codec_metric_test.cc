// The fast path for results (protocol/src/codec_metric.cc) against the
// general decoder: on every input, both give the same message or the same
// error. Inputs: the checked-in vectors, hand-made results with every field
// shape (and the shapes the fast path leaves to the general decoder), and
// truncations and byte flips of all of them.
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include <gtest/gtest.h>
#include <msgpack.hpp>

#include "codec_internal.h"
#include "test_util.h"
#include "tunehost/protocol/codec.h"
#include "tunehost/protocol/limits.h"
#include "protocol_testing.h"

namespace tunehost::protocol {
namespace {

using Packer = msgpack::packer<msgpack::sbuffer>;
using Field = std::function<void(Packer&)>;

// An envelope written key by key, so that keys may repeat, go missing or
// come in any order.
std::string Envelope(const std::vector<std::pair<std::string, Field>>& body,
                     const std::vector<std::pair<std::string, Field>>& extra_envelope = {},
                     std::string type = "ME", uint64_t version = kProtocolVersion) {
  msgpack::sbuffer buf;
  Packer pk(buf);
  pk.pack_map(static_cast<uint32_t>(4 + extra_envelope.size()));
  pk.pack("v");
  pk.pack_uint64(version);
  pk.pack("body");
  pk.pack_map(static_cast<uint32_t>(body.size()));
  for (const auto& [key, write] : body) {
    pk.pack(key);
    write(pk);
  }
  pk.pack("type");
  pk.pack(type);
  pk.pack("id");
  pk.pack_uint64(42);
  for (const auto& [key, write] : extra_envelope) {
    pk.pack(key);
    write(pk);
  }
  return std::string(buf.data(), buf.size());
}

Field Str(std::string s) {
  return [s](Packer& pk) { pk.pack(s); };
}
Field UInt(uint64_t n) {
  return [n](Packer& pk) { pk.pack_uint64(n); };
}
Field Int(int64_t n) {
  return [n](Packer& pk) { pk.pack_int64(n); };
}
Field F64(double d) {
  return [d](Packer& pk) { pk.pack_double(d); };
}
Field F32(float f) {
  return [f](Packer& pk) { pk.pack_float(f); };
}
Field Nil() {
  return [](Packer& pk) { pk.pack_nil(); };
}

std::vector<std::pair<std::string, Field>> Plain() {
  return {{"trial_id", Str("T00001")}, {"attempt", UInt(2)},
          {"parameter_id", UInt(7)},   {"type", Str("PERIODICAL")},
          {"sequence", UInt(9)},       {"value", F64(0.25)},
          {"worker_id", Str("w-1")}};
}

// Plain() with one key's value replaced (or, with `write` empty, removed).
std::vector<std::pair<std::string, Field>> With(const std::string& key, Field write) {
  std::vector<std::pair<std::string, Field>> body;
  bool found = false;
  for (auto& [k, w] : Plain()) {
    if (k != key) {
      body.emplace_back(k, w);
    } else if (write) {
      body.emplace_back(k, write);
      found = true;
    }
  }
  if (!found && write) body.emplace_back(key, write);
  return body;
}

std::vector<std::string> Results() {
  const std::string long_id(kMaxIdBytes + 1, 'x');
  const std::string max_id(kMaxIdBytes, 'y');
  std::vector<std::string> out = {
      Envelope(Plain()),
      Envelope(With("value", UInt(3))),
      Envelope(With("value", UInt(uint64_t{1} << 40))),
      Envelope(With("value", Int(-5))),
      Envelope(With("value", F32(0.1f))),
      Envelope(With("value", F64(1e308))),
      Envelope(With("value", [](Packer& pk) {
        pk.pack_map(2);
        pk.pack("default");
        pk.pack_double(0.5);
        pk.pack("loss");
        pk.pack_uint64(2);
      })),
      Envelope(With("value", [](Packer& pk) {
        pk.pack_array(1);
        pk.pack_double(0.5);
      })),
      Envelope(With("value", Str("0.5"))),
      Envelope(With("value", Nil())),
      Envelope(With("value", {})),
      Envelope(With("type", Str("FINAL"))),
      Envelope(With("type", Str("final"))),
      Envelope(With("type", UInt(1))),
      Envelope(With("trial_id", Str(max_id))),
      Envelope(With("trial_id", Str(long_id))),
      Envelope(With("trial_id", Str(""))),
      Envelope(With("trial_id", {})),
      Envelope(With("trial_id", UInt(1))),
      Envelope(With("attempt", {})),
      Envelope(With("attempt", UInt(uint64_t{1} << 32))),
      Envelope(With("attempt", Int(-1))),
      Envelope(With("attempt", Nil())),
      Envelope(With("parameter_id", {})),
      Envelope(With("parameter_id", Nil())),
      Envelope(With("parameter_id", Int(-3))),
      Envelope(With("parameter_id", Str("hb-1"))),
      Envelope(With("parameter_id", Str(long_id))),
      Envelope(With("parameter_id", UInt(uint64_t{1} << 63))),
      Envelope(With("parameter_id", F64(1.5))),
      Envelope(With("sequence", {})),
      Envelope(With("sequence", Int(-1))),
      Envelope(With("sequence", UInt(UINT64_MAX))),
      Envelope(With("worker_id", {})),
      Envelope(With("worker_id", Str(long_id))),
      Envelope(With("worker_id", [](Packer& pk) { pk.pack_true(); })),
      Envelope(With("unknown", Str("ignored by the general decoder"))),
      Envelope({}),
      Envelope(Plain(), {{"extra", UInt(1)}}),
      Envelope(Plain(), {}, "EN"),
      Envelope(Plain(), {}, "ME", kProtocolVersion + 1),
  };
  // A key twice: the general decoder reads the first.
  auto twice = Plain();
  twice.emplace_back("sequence", UInt(10));
  out.push_back(Envelope(twice));
  auto twice_envelope = Plain();
  out.push_back(Envelope(twice_envelope, {{"type", Str("EN")}}));
  // Trailing bytes after the envelope.
  out.push_back(Envelope(Plain()) + std::string(1, '\x01'));
  return out;
}

// Both paths on the same bytes.
void ExpectSame(const std::string& bytes) {
  Message fast, slow;
  const Status fast_st = Decode(bytes, &fast);
  const Status slow_st = codec_detail::DecodeGeneral(bytes, &slow, DecodeOptions{});
  ASSERT_EQ(fast_st.ok(), slow_st.ok()) << testing::ToHex(bytes) << ": " << slow_st.ToString();
  EXPECT_EQ(fast_st.ToString(), slow_st.ToString()) << testing::ToHex(bytes);
  EXPECT_EQ(fast.id, slow.id) << testing::ToHex(bytes);
  if (!fast_st.ok()) return;
  EXPECT_EQ(fast.type, slow.type);
  EXPECT_EQ(Encode(fast), Encode(slow)) << testing::ToHex(bytes);
  if (const auto* m = std::get_if<ReportMetricData>(&fast.body)) {
    EXPECT_EQ(m->value.scalar, std::get<ReportMetricData>(slow.body).value.scalar);
  }
}

TEST(CodecMetricTest, EveryResultShapeDecodesAsTheGeneralDecoderDecodesIt) {
  size_t accepted = 0;
  for (const std::string& bytes : Results()) {
    ExpectSame(bytes);
    Message m;
    accepted += Decode(bytes, &m).ok();
  }
  // The set holds both kinds, so both outcomes are compared.
  EXPECT_GT(accepted, 10u);
  EXPECT_LT(accepted, Results().size());
}

// A result in the wide formats a sender may choose (map 16/32, str 8/16/32,
// int 8/16, uint 64, float 32, negative int 64), byte by byte.
std::string WideResult(std::string_view value) {
  std::string b;
  auto key = [&b](std::string_view k) {
    b += static_cast<char>(0xd9);  // str 8
    b += static_cast<char>(k.size());
    b += k;
  };
  b += std::string("\xde\x00\x04", 3);  // map 16, 4 entries
  key("v");
  b += "\xd0\x01";  // int 8: 1
  key("type");
  b += std::string("\xda\x00\x02ME", 5);  // str 16
  key("id");
  b += std::string("\xcf\x00\x00\x00\x00\x00\x00\x00\x2a", 9);  // uint 64: 42
  key("body");
  b += std::string("\xdf\x00\x00\x00\x05", 5);  // map 32, 5 entries
  key("trial_id");
  b += std::string("\xdb\x00\x00\x00\x02T1", 7);  // str 32
  key("type");
  b += "\xa5" "FINAL";
  key("sequence");
  b += std::string("\xd1\x00\x05", 3);  // int 16: 5
  key("attempt");
  b += std::string("\xcc\x03", 2);  // uint 8: 3
  key("value");
  b += value;
  return b;
}

TEST(CodecMetricTest, TheFastPathTakesPlainResultsInEveryFormat) {
  const std::vector<std::string> taken = {
      Envelope(Plain()),
      Envelope(With("value", UInt(3))),
      Envelope(With("value", UInt(uint64_t{1} << 40))),
      Envelope(With("value", Int(-5))),
      Envelope(With("value", F32(0.1f))),
      Envelope(With("type", Str("FINAL"))),
      Envelope(With("parameter_id", Int(-3))),
      Envelope(With("parameter_id", Str("hb-1"))),
      Envelope(With("parameter_id", {})),
      Envelope(With("worker_id", {})),
      WideResult(std::string("\xca\x3f\x00\x00\x00", 5)),                  // float 32: 0.5
      WideResult(std::string("\xd3\xff\xff\xff\xff\xff\xff\xff\xfe", 9)),  // int 64: -2
      WideResult(std::string("\xcf\x00\x00\x00\x00\x00\x00\x00\x07", 9)),  // uint 64: 7
  };
  for (const std::string& bytes : taken) {
    Message fast;
    EXPECT_TRUE(codec_detail::DecodeMetricFast(bytes, &fast)) << testing::ToHex(bytes);
    ExpectSame(bytes);
  }
  Message m;
  ASSERT_TRUE(codec_detail::DecodeMetricFast(WideResult("\x05"), &m));
  const auto& wide = std::get<ReportMetricData>(m.body);
  EXPECT_EQ(m.id, 42u);
  EXPECT_EQ(wide.trial_id, "T1");
  EXPECT_EQ(wide.attempt, 3u);
  EXPECT_EQ(wide.sequence, 5u);
  EXPECT_EQ(wide.type, MetricType::kFinal);
  EXPECT_EQ(wide.value.scalar, 5.0);
  // Cut anywhere, a wide result is refused by both paths alike.
  const std::string whole = WideResult("\x05");
  for (size_t n = 0; n < whole.size(); ++n) ExpectSame(whole.substr(0, n));
}

TEST(CodecMetricTest, EveryVectorDecodesAsTheGeneralDecoderDecodesIt) {
  for (const char* file : {"vectors.json", "invalid.json"}) {
    for (const auto& v : testing::LoadVectorFile(file)) ExpectSame(testing::FromHex(v.at("hex")));
  }
}

TEST(CodecMetricTest, TruncationsAndByteFlipsDecodeAsTheGeneralDecoderDecodesThem) {
  std::mt19937 rng(20261127);
  for (const std::string& original : Results()) {
    for (size_t n = 0; n < original.size(); ++n) ExpectSame(original.substr(0, n));
    for (int round = 0; round < 200; ++round) {
      std::string bytes = original;
      const int flips = 1 + static_cast<int>(rng() % 3);
      for (int f = 0; f < flips; ++f) bytes[rng() % bytes.size()] = static_cast<char>(rng());
      ExpectSame(bytes);
    }
  }
}

}  // namespace
}  // namespace tunehost::protocol
