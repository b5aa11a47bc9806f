#pragma once
/// \file What a cluster launcher prints, split back into the ranks' launcher lines
/// (trace/TaskLines.hpp) and the launcher's own text (issue 17).
///
/// srun keeps each task's lines whole (they are shorter than its 1024-byte messages), so its
/// stdout is read line by line. mpirun interleaves the ranks' output in arbitrary chunks; with
/// --tag-output each chunk starts with "[job,rank]<stdout>:" (or <stderr>), and the text up
/// to the next tag belongs to that rank — base64 and the line prefix never contain '[', so a
/// tag cannot be forged by a payload.
///
///   LauncherOutput out(LauncherOutput::Tags::OpenMpi);
///   out.feed(bytesFromChannelStdout, false);
///   for (auto& item : out.take()) ...

#include <cstddef>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace pipestudio::remote {

class LauncherOutput {
 public:
  enum class Tags { None, OpenMpi };
  explicit LauncherOutput(Tags tags) : m_tags(tags) {}

  struct Item {
    enum class Kind {
      Stream,     ///< trace stream bytes of `rank`
      Log,        ///< stderr bytes of `rank`'s executor
      Exit,       ///< `rank`'s executor ended with `status`
      Text,       ///< anything else, one line with its newline: the launcher's own messages
                  ///< (rank -1) or a rank's output outside the line format (its tag's rank)
      Malformed,  ///< a launcher line that does not parse (`bytes` says why); rank when known
    };
    Kind kind = Kind::Text;
    int rank = -1;
    std::string bytes;
    int status = 0;
  };

  /// Bytes as they came from the launcher's stdout (`fromStderr` false) or stderr.
  void feed(std::string_view bytes, bool fromStderr);
  /// The launcher ended: text still waiting for its newline comes out as Text.
  void finish();
  /// Everything decoded since the last call, in order.
  std::vector<Item> take();

  /// A line longer than this without a newline is passed on as Text (bounded memory).
  static constexpr std::size_t kMaxLineBytes = 64 * 1024;

 private:
  // Source of a line: (rank from the tag or -1, stderr?).
  using Source = std::pair<int, bool>;
  void appendText(const Source& source, std::string_view text);
  void emitLine(const Source& source, std::string line);
  void feedTagged(std::string_view bytes, bool fromStderr);

  Tags m_tags;
  std::map<Source, std::string> m_lines;            ///< partial lines per source
  std::string m_held[2];                            ///< per channel: a tag that may be cut in two
  Source m_current[2] = {{-1, false}, {-1, true}};  ///< per channel: whose text is flowing
  std::vector<Item> m_items;
};

}  // namespace pipestudio::remote
