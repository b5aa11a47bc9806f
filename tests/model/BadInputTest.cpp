// Every rule of docs/formats.md "bad input gets a clear error": one file per rule under
// tests/data/bad/, each checked for the exact message shape
// `file:line:col: /json/pointer: what (expected …)` and for the place it points at.
#include <gtest/gtest.h>

#include <array>
#include <cctype>
#include <regex>
#include <string>
#include <vector>

#include "pipestudio/model/ModelIO.hpp"
#include "support/ExpectedMatchers.hpp"
#include "support/FileCaseName.hpp"
#include "support/PointedMessage.hpp"

using pipestudio::test::HasError;
using pipestudio::test::HasErrorThat;
using ::testing::StartsWith;

namespace pipestudio {
namespace {

const std::string kBad = std::string(PIPESTUDIO_TEST_DATA) + "/bad/";

enum class Kind { Model, Cluster, Hosts };

struct Case {
  const char* file;
  Kind kind;
  const char* pointer;  ///< JSON pointer the first message names
  int line;             ///< where that value sits in the file
  int column;
  const char* what;  ///< a fragment of the message
};

std::string load(Kind kind, const std::string& path) {
  switch (kind) {
    case Kind::Model: {
      auto r = loadModel(path);
      return r ? std::string() : r.message();
    }
    case Kind::Cluster: {
      auto r = loadCluster(path);
      return r ? std::string() : r.message();
    }
    case Kind::Hosts: {
      auto r = loadHosts(path);
      return r ? std::string() : r.message();
    }
  }
  return {};
}

class BadInput : public ::testing::TestWithParam<Case> {};

TEST_P(BadInput, NamesFileLinePointerAndExpectation) {
  const Case& c = GetParam();
  const std::string path = kBad + c.file;
  const std::string message = load(c.kind, path);
  ASSERT_FALSE(message.empty()) << c.file << " was accepted";
  test::expectPointedMessage(message, path, c.line, c.column, c.pointer, c.what);
}

// Lines and columns point at the offending value (or, for a missing field, the object).
const auto kCases = std::to_array<Case>({
    {"model-name-wrong-type.json", Kind::Model, "/name", 3, 11, "is an integer (expected a string)"},
    {"model-missing-name.json", Kind::Model, "/", 1, 1, "missing required field 'name'"},
    {"model-missing-schema.json", Kind::Model, "/", 1, 1, "missing required field 'schema'"},
    {"model-unknown-schema.json", Kind::Model, "/schema", 2, 13, "is not a pipestudio.model document"},
    {"model-future-schema.json", Kind::Model, "/schema", 2, 13, "version this PipeStudio does not know"},
    {"model-negative-time.json", Kind::Model, "/components/0/layers/1/forward_ms", 18, 25,
     "is -1.5 (expected a number in [0, 1e+07])"},
    {"model-negative-size.json", Kind::Model, "/components/0/layers/0/activation_bytes", 14, 31, "is -4096"},
    {"model-absurd-size.json", Kind::Model, "/components/0/layers/0/activation_bytes", 14, 31,
     "is 100000000000000000 (expected an integer in [0, 1125899906842624])"},
    {"model-absurd-params.json", Kind::Model, "/components/0/layers/0/params", 14, 21, "is 1e+30"},
    {"model-fractional-samples.json", Kind::Model, "/samples_per_microbatch", 4, 29, "2.5 (expected an integer)"},
    {"model-empty-components.json", Kind::Model, "/components", 5, 17, "no components"},
    {"model-empty-layers.json", Kind::Model, "/components/0/layers", 9, 17, "has no layers"},
    {"model-duplicate-component.json", Kind::Model, "/components/1/name", 18, 15, "duplicate component name 'unet'"},
    {"model-duplicate-layer.json", Kind::Model, "/components/0/layers", 9, 17, "duplicate layer name 'a'"},
    {"model-feeds-unknown.json", Kind::Model, "/components/0/feeds/0", 10, 9,
     "'unte' is not a component of this model (expected one of: text, unet)"},
    {"model-feeds-cycle.json", Kind::Model, "/components/2/feeds", 37, 16, "feeds form a cycle: a → b → c → a"},
    {"model-feeds-self.json", Kind::Model, "/components/0/feeds/0", 10, 9, "feeds itself"},
    {"model-unknown-field.json", Kind::Model, "/components/0/layers/0/forward_msec", 12, 27,
     "unknown field 'forward_msec'"},
    {"model-no-costs.json", Kind::Model, "/components/0/layers/0", 10, 9, "neither measured costs nor a shape"},
    {"model-frozen-backward.json", Kind::Model, "/components/0/layers/0/backward_input_ms", 17, 32, "has no backward"},
    {"model-heads-not-dividing.json", Kind::Model, "/components/0/layers/0/transformer/heads", 16, 22,
     "not divisible by heads 16"},
    {"model-router-groups-not-dividing.json", Kind::Model, "/components/0/layers/0/transformer/router_groups", 18, 30,
     "router_groups 5 does not divide experts 64"},
    {"model-router-group-topk-too-few.json", Kind::Model, "/components/0/layers/0/transformer/router_group_topk", 19,
     34, "router_group_topk 1 groups of 8 experts hold fewer than top_k 10"},
    {"model-router-groups-alone.json", Kind::Model, "/components/0/layers/0/transformer/router_groups", 18, 30,
     "needs both 'router_groups' and 'router_group_topk'"},
    {"model-lm-head-no-vocab.json", Kind::Model, "/components/0/layers/0/transformer", 13, 26, "no 'vocab'"},
    {"model-shape-wrong-type.json", Kind::Model, "/components/0/layers/0/transformer/hidden", 14, 23,
     "is a string (expected an integer)"},
    {"model-no-trainable.json", Kind::Model, "/", 1, 1, "no trainable component"},
    {"model-repeat-absurd.json", Kind::Model, "/components/0/layers/0/repeat", 14, 21, "is 1000000"},
    {"model-repeat-budget.json", Kind::Model, "/components/2/layers/0/repeat", 38, 21, "more than 100000 layers"},
    {"model-layers-and-components.json", Kind::Model, "/", 1, 1, "both 'components' and 'layers'"},
    {"model-trainable-wrong-type.json", Kind::Model, "/components/0/trainable", 8, 20, "(expected true or false)"},
    {"model-components-wrong-type.json", Kind::Model, "/components", 5, 17, "is an object (expected an array)"},
    {"model-root-array.json", Kind::Model, "/", 1, 1, "is an array (expected an object)"},
    {"model-wgrad-exceeds-activation.json", Kind::Model, "/components/0/layers/0/weight_grad_bytes", 14, 32,
     "exceeds activation_bytes"},
    {"cluster-zero-gpus.json", Kind::Cluster, "/nodes/0/gpus", 13, 15, "is 0 (expected an integer in [1, 1024])"},
    {"cluster-zero-nodes.json", Kind::Cluster, "/nodes", 10, 12, "is 0 (expected an integer in [1, 100000])"},
    {"cluster-empty-nodes.json", Kind::Cluster, "/nodes", 10, 12, "no nodes"},
    {"cluster-missing-gpu.json", Kind::Cluster, "/", 1, 1, "missing required field 'gpu'"},
    {"cluster-gpu-wrong-type.json", Kind::Cluster, "/gpu", 4, 10, "is an integer (expected an object)"},
    {"cluster-gpu-unknown-name.json", Kind::Cluster, "/gpu", 4, 10, "'A999' is not a GPU of the catalogue"},
    {"cluster-negative-bandwidth.json", Kind::Cluster, "/links/intra_node/bandwidth_gbps", 18, 25, "is -10"},
    {"cluster-absurd-memory.json", Kind::Cluster, "/gpu/memory_gib", 7, 19, "is 1e+09"},
    {"cluster-matrix-rows.json", Kind::Cluster, "/bandwidth_matrix_gbps", 22, 28, "has 1 rows (expected 2"},
    {"cluster-ssh-password.json", Kind::Cluster, "/nodes/0/ssh/password", 16, 21, "passwords are never stored"},
    {"cluster-multinode-no-inter.json", Kind::Cluster, "/links", 20, 12, "missing required field 'inter_node'"},
    {"cluster-future-schema.json", Kind::Cluster, "/schema", 2, 13, "'pipestudio.cluster/7' is a version"},
    {"cluster-host-switch-zero-gpus.json", Kind::Cluster, "/links/host_switch/gpus", 23, 15,
     "is 0 (expected an integer in [1, 1024])"},
    {"cluster-gemm-fill-negative.json", Kind::Cluster, "/gpu/gemm_fill_k/fp8", 8, 40,
     "is -5 (expected a number in [0, 65536])"},
    {"cluster-ep-overlap-efficiency-above-one.json", Kind::Cluster, "/gpu/ep_overlap_efficiency", 8, 30,
     "is 1.5 (expected a number in [0.001, 1])"},
    {"cluster-nvls-without-figures.json", Kind::Cluster, "/nvls", 5, 11,
     "is true but GPU 'A100-SXM4-80GB' has no NVLS figures"},
    {"cluster-nvls-one-channel.json", Kind::Cluster, "/gpu/nvls/channels", 6, 46,
     "is 1 (expected an integer in [2, 64])"},
    {"cluster-gemm-fill-unknown-precision.json", Kind::Cluster, "/gpu/gemm_fill_k/int4", 8, 41,
     "'int4' is not a precision"},
    {"cluster-expert-gemm-curve-bad-precision.json", Kind::Cluster, "/gpu/expert_gemm_curve/1/precision", 10, 21,
     "'fp7' is not a precision"},
    {"cluster-expert-gemm-curve-zero-efficiency.json", Kind::Cluster, "/gpu/expert_gemm_curve/0/efficiency", 9, 93,
     "is 0 (expected a number in [0.001, 4])"},
    {"cluster-gpus-per-node-with-array.json", Kind::Cluster, "/gpus_per_node", 22, 20, "only allowed with an integer"},
    {"hosts-password.json", Kind::Hosts, "/hosts/0/password", 10, 19, "passwords are never stored"},
    {"hosts-empty.json", Kind::Hosts, "/hosts", 4, 12, "no hosts"},
    {"hosts-bad-port.json", Kind::Hosts, "/hosts/0/port", 7, 15, "is 70000 (expected an integer in [1, 65535])"},
    {"hosts-bad-launcher.json", Kind::Hosts, "/launcher", 3, 15, "'telnet' is not a launcher"},
    {"hosts-missing-gpus.json", Kind::Hosts, "/hosts/0", 5, 5, "missing required field 'gpus'"},
});

INSTANTIATE_TEST_SUITE_P(Corpus, BadInput, ::testing::ValuesIn(kCases), test::fileCaseName<Case>);

// Syntax-level problems have no JSON pointer yet: `file:line:col: what (expected …)`.
struct SyntaxCase {
  const char* file;
  int line;
  int column;
  const char* what;
};

class BadSyntax : public ::testing::TestWithParam<SyntaxCase> {};

TEST_P(BadSyntax, NamesFileLineAndExpectation) {
  const SyntaxCase& c = GetParam();
  const std::string path = kBad + c.file;
  for (const Kind kind : {Kind::Model, Kind::Cluster, Kind::Hosts}) {
    const std::string message = load(kind, path);
    const std::string prefix = path + ":" + std::to_string(c.line) + ":" + std::to_string(c.column) + ": ";
    EXPECT_EQ(message.rfind(prefix, 0), 0U) << message;
    EXPECT_NE(message.find(c.what), std::string::npos) << message;
    EXPECT_TRUE(std::regex_match(message, std::regex("^.+:[0-9]+:[0-9]+: .+ \\(expected .+\\)$"))) << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  }
}

const auto kSyntaxCases = std::to_array<SyntaxCase>({
    {"empty.json", 1, 1, "file is empty"},
    {"whitespace-only.json", 1, 1, "file is empty"},
    {"truncated.json", 11, 13, "truncated JSON"},
    {"trailing-garbage.json", 24, 1, "expected end of input"},
    {"nan-literal.json", 13, 25, "invalid literal"},
    {"single-quotes.json", 1, 2, "syntax error"},
    {"binary-garbage.bin", 1, 1, "syntax error"},
    {"utf16-bom.json", 1, 1, "is UTF-16 (little-endian) text (expected UTF-8)"},
    {"model-nonfinite-time.json", 18, 25, "number 1e999 is out of range (expected a finite number)"},
    {"model-nonfinite-size.json", 12, 30, "number -1e999 is out of range"},
    {"cluster-nonfinite-latency.json", 19, 21, "number 1e999 is out of range"},
});

INSTANTIATE_TEST_SUITE_P(Corpus, BadSyntax, ::testing::ValuesIn(kSyntaxCases), test::fileCaseName<SyntaxCase>);

TEST(BadInput, BinaryGarbageIsNotEchoedToTheTerminal) {
  const std::string message = load(Kind::Model, kBad + "binary-garbage.bin");
  for (const char ch : message) {
    const auto u = static_cast<unsigned char>(ch);
    EXPECT_TRUE(u >= 0x20 && u < 0x7f) << "byte " << static_cast<int>(u) << " in: " << message;
  }
}

TEST(BadInput, MissingFileAndDirectoryAreNamed) {
  const std::string missing = kBad + "does-not-exist.json";
  auto m = loadModel(missing);
  EXPECT_THAT(m, HasErrorThat(StartsWith(missing + ": cannot open")));
  auto d = loadModel(kBad);
  EXPECT_THAT(d, HasError("is a directory"));
}

TEST(BadInput, ManyProblemsAreAllReportedButBounded) {
  // A model with 5000 negative layer times yields at most ~100 messages, each with its pointer.
  std::string text = R"({"schema": "pipestudio.model/1", "name": "m", "layers": [)";
  for (int i = 0; i < 5000; ++i) {
    text += (i ? "," : "") + std::string(R"({"name": "l)") + std::to_string(i) + R"(", "forward_ms": -1})";
  }
  text += "]}";
  auto doc = parseJson(text, "<many>");
  ASSERT_TRUE(doc);
  JsonReader reader(*doc);
  (void)readModel(reader, reader.root());
  ASSERT_FALSE(reader.ok());
  EXPECT_LE(reader.errors().size(), 101U);
  EXPECT_GE(reader.errors().size(), 100U);
  EXPECT_NE(reader.errors()[7].find("/layers/7/forward_ms"), std::string::npos) << reader.errors()[7];
  EXPECT_NE(reader.errors().back().find("too many errors"), std::string::npos);
}

}  // namespace
}  // namespace pipestudio
