// The launcher's merged output split back per rank: whole lines (srun) and Open MPI's
// tagged chunks, cut at every possible place by the SSH channel's reads.
#include <gtest/gtest.h>

#include <map>
#include <random>

#include "pipestudio/remote/LauncherOutput.hpp"
#include "pipestudio/trace/TaskLines.hpp"

namespace pipestudio::remote {
namespace {

using Item = LauncherOutput::Item;

std::string randomBytes(std::mt19937& rng, std::size_t n) {
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>(rng());
  return s;
}

struct Collected {
  std::map<int, std::string> stream, log, text;
  std::map<int, int> exit;
  std::string launcherText;
  std::vector<std::string> malformed;
};

Collected collect(const std::vector<Item>& items) {
  Collected c;
  for (const auto& i : items) {
    switch (i.kind) {
      case Item::Kind::Stream:
        c.stream[i.rank] += i.bytes;
        break;
      case Item::Kind::Log:
        c.log[i.rank] += i.bytes;
        break;
      case Item::Kind::Exit:
        c.exit[i.rank] = i.status;
        break;
      case Item::Kind::Text:
        if (i.rank < 0)
          c.launcherText += i.bytes;
        else
          c.text[i.rank] += i.bytes;
        break;
      case Item::Kind::Malformed:
        c.malformed.push_back(i.bytes);
        break;
    }
  }
  return c;
}

// Feeds `text` in pieces of random size (1..max), as channel reads would cut it.
std::vector<Item> feedInPieces(LauncherOutput& out, const std::string& text, bool fromStderr, std::mt19937& rng,
                               std::size_t max) {
  std::vector<Item> items;
  for (std::size_t off = 0; off < text.size();) {
    const std::size_t n = std::min(text.size() - off, 1 + rng() % max);
    out.feed(std::string_view(text).substr(off, n), fromStderr);
    for (auto& i : out.take()) items.push_back(std::move(i));
    off += n;
  }
  out.finish();
  for (auto& i : out.take()) items.push_back(std::move(i));
  return items;
}

TEST(LauncherOutput, SrunLinesOfSeveralRanksAndTheLaunchersOwnText) {
  std::mt19937 rng(1);
  std::map<int, std::string> streams;
  std::map<int, std::string> lines;  // per rank, all its launcher lines
  for (int r = 0; r < 3; ++r) {
    streams[r] = randomBytes(rng, 3000 + 500 * static_cast<std::size_t>(r));
    trace::appendTaskLines(r, trace::TaskLineKind::Stream, streams[r], lines[r]);
    trace::appendTaskLines(r, trace::TaskLineKind::Log, "rank " + std::to_string(r) + " says hi\n", lines[r]);
    trace::appendTaskExit(r, r == 2 ? 137 : 0, lines[r]);
  }
  // srun interleaves whole lines of the tasks, and prints its own messages in between.
  std::string merged = "srun: job 12 queued and waiting for resources\n";
  std::map<int, std::size_t> pos;
  for (bool more = true; more;) {
    more = false;
    for (int r = 0; r < 3; ++r) {
      const auto nl = lines[r].find('\n', pos[r]);
      if (nl == std::string::npos) continue;
      merged += lines[r].substr(pos[r], nl + 1 - pos[r]);
      pos[r] = nl + 1;
      more = true;
    }
  }
  merged += "srun: error: psnode: task 2: Killed";  // no final newline: flushed by finish()
  LauncherOutput out(LauncherOutput::Tags::None);
  const Collected c = collect(feedInPieces(out, merged, false, rng, 700));
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(c.stream.at(r), streams[r]) << "rank " << r;
    EXPECT_EQ(c.log.at(r), "rank " + std::to_string(r) + " says hi\n");
  }
  EXPECT_EQ(c.exit.at(2), 137);
  EXPECT_EQ(c.exit.at(0), 0);
  EXPECT_EQ(c.launcherText, "srun: job 12 queued and waiting for resources\nsrun: error: psnode: task 2: Killed\n");
  EXPECT_TRUE(c.malformed.empty());
}

TEST(LauncherOutput, OpenMpiTaggedChunksAreReassembledPerRank) {
  std::mt19937 rng(2);
  std::map<int, std::string> streams;
  std::map<int, std::string> lines;
  for (int r = 0; r < 4; ++r) {
    streams[r] = randomBytes(rng, 20000);
    trace::appendTaskLines(r, trace::TaskLineKind::Stream, streams[r], lines[r]);
    trace::appendTaskExit(r, 0, lines[r]);
  }
  // mpirun forwards each rank's output in chunks of any size, each chunk tagged, the chunks of
  // the ranks interleaved; its own messages are untagged.
  std::string merged;
  std::map<int, std::size_t> pos;
  for (bool more = true; more;) {
    more = false;
    for (int r = 0; r < 4; ++r) {
      if (pos[r] >= lines[r].size()) continue;
      const std::size_t n = std::min(lines[r].size() - pos[r], 1 + rng() % 3000);
      merged += "[1," + std::to_string(r) + "]<stdout>:" + lines[r].substr(pos[r], n);
      pos[r] += n;
      more = true;
    }
  }
  LauncherOutput out(LauncherOutput::Tags::OpenMpi);
  // Tags cut anywhere by the reads: every piece size from 1 byte up.
  const Collected c = collect(feedInPieces(out, merged, false, rng, 64));
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(c.stream.at(r), streams[r]) << "rank " << r;
    EXPECT_EQ(c.exit.at(r), 0);
  }
  EXPECT_TRUE(c.malformed.empty());
  EXPECT_TRUE(c.launcherText.empty()) << c.launcherText;
}

TEST(LauncherOutput, OpenMpiStderrAndTextThatOnlyLooksLikeATag) {
  LauncherOutput out(LauncherOutput::Tags::OpenMpi);
  out.feed("[1,1]<stderr>:pipestudio-exec --task mpirun: OMPI_COMM_WORLD_SIZE is not set\n", true);
  out.feed("--------\n[node7:01234] *** Process received signal ***\n[1,x]<stdout>:no\n", true);
  out.feed("[1,0]<stdout>:", false);
  out.feed("plain [text] with [1,2] brackets\n", false);
  out.finish();
  const Collected c = collect(out.take());
  EXPECT_EQ(c.text.at(1),
            "pipestudio-exec --task mpirun: OMPI_COMM_WORLD_SIZE is not set\n--------\n"
            "[node7:01234] *** Process received signal ***\n[1,x]<stdout>:no\n")
      << "mpirun's own untagged lines after a rank's chunk stay with that rank until the next tag";
  EXPECT_EQ(c.text.at(0), "plain [text] with [1,2] brackets\n");
}

TEST(LauncherOutput, MalformedAndEndlessLinesAreBounded) {
  LauncherOutput out(LauncherOutput::Tags::None);
  out.feed("@PS1 0 s not*base64\n@PS1 zero s AAAA\n", false);
  const std::string endless(LauncherOutput::kMaxLineBytes + 10, 'x');
  out.feed(endless, false);
  const Collected c = collect(out.take());
  ASSERT_EQ(c.malformed.size(), 2U);
  EXPECT_NE(c.malformed[0].find("base64"), std::string::npos) << c.malformed[0];
  EXPECT_NE(c.malformed[1].find("rank"), std::string::npos) << c.malformed[1];
  EXPECT_EQ(c.launcherText.size(), endless.size() + 1) << "passed on, not buffered without bound";
}

}  // namespace
}  // namespace pipestudio::remote
