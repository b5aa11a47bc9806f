#include "pipestudio/common/FdStream.hpp"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace pipestudio {

FdStreamBuf::FdStreamBuf(int fd, std::size_t bufferBytes) : m_fd(fd), m_buffer(std::max<std::size_t>(1, bufferBytes)) {
  setp(m_buffer.data(), m_buffer.data() + m_buffer.size());
}

FdStreamBuf::~FdStreamBuf() { flush(); }

bool FdStreamBuf::writeAll(const char* data, std::size_t size) {
  if (m_error != 0) return false;  // the first failure is the reason; later output is lost anyway
  while (size > 0) {
    const ssize_t n = ::write(m_fd, data, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      m_error = n < 0 ? errno : EIO;
      return false;
    }
    data += n;
    size -= static_cast<std::size_t>(n);
  }
  return true;
}

bool FdStreamBuf::flush() {
  const auto pending = static_cast<std::size_t>(pptr() - pbase());
  const bool ok = writeAll(pbase(), pending);
  setp(m_buffer.data(), m_buffer.data() + m_buffer.size());
  return ok && m_error == 0;
}

FdStreamBuf::int_type FdStreamBuf::overflow(int_type ch) {
  if (!flush()) return traits_type::eof();
  if (traits_type::eq_int_type(ch, traits_type::eof())) return traits_type::not_eof(ch);
  *pptr() = traits_type::to_char_type(ch);
  pbump(1);
  return ch;
}

std::streamsize FdStreamBuf::xsputn(const char* data, std::streamsize count) {
  const auto size = static_cast<std::size_t>(count);
  const auto room = static_cast<std::size_t>(epptr() - pptr());
  if (size <= room) {
    std::memcpy(pptr(), data, size);
    pbump(static_cast<int>(size));
    return count;
  }
  // Larger than what is left: out with the buffer, then the data itself.
  if (!flush() || !writeAll(data, size)) return 0;
  return count;
}

int FdStreamBuf::sync() { return flush() ? 0 : -1; }

std::string FdStreamBuf::errorText() const {
  if (m_error == 0) return {};
  if (m_error == EBADF) return "the descriptor is closed (" + std::string(std::strerror(m_error)) + ")";
  return std::strerror(m_error);
}

}  // namespace pipestudio
