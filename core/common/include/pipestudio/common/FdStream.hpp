#pragma once
/// \file Output streams on a file descriptor that remember why a write failed. Every output
/// of PipeStudio's tools (stdout of pipestudio-cli, -o files) goes through one, so a full disk
/// or a closed descriptor becomes a message with the system's reason ("No space left on
/// device") and a non-zero exit, never silent success or an empty "file: " message.

#include <ostream>
#include <streambuf>
#include <string>
#include <vector>

namespace pipestudio {

/// A buffered streambuf writing to `fd` (which it does not close). After the first failed
/// write it keeps that write's errno, drops further output, and the stream it backs goes bad.
class FdStreamBuf final : public std::streambuf {
 public:
  explicit FdStreamBuf(int fd, std::size_t bufferBytes = std::size_t{1} << 16);
  ~FdStreamBuf() override;
  FdStreamBuf(const FdStreamBuf&) = delete;
  FdStreamBuf& operator=(const FdStreamBuf&) = delete;

  /// Writes out what is buffered; false when a write has failed (now or before).
  bool flush();
  /// errno of the first failed write, 0 while every write succeeded.
  int error() const { return m_error; }
  /// Why the first write failed, in words ("No space left on device"; a closed descriptor is
  /// named as such); empty while every write succeeded.
  std::string errorText() const;

 protected:
  int_type overflow(int_type ch) override;
  std::streamsize xsputn(const char* data, std::streamsize count) override;
  int sync() override;

 private:
  bool writeAll(const char* data, std::size_t size);
  int m_fd;
  std::vector<char> m_buffer;
  int m_error = 0;
};

/// An std::ostream over an FdStreamBuf.
class FdOStream final : public std::ostream {
 public:
  explicit FdOStream(int fd) : std::ostream(nullptr), m_buf(fd) { rdbuf(&m_buf); }
  FdStreamBuf& buffer() { return m_buf; }

 private:
  FdStreamBuf m_buf;
};

}  // namespace pipestudio
