#include "pipestudio/remote/Sha256.hpp"

#include <array>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fstream>

namespace pipestudio::remote {
namespace {

// FIPS 180-4 §4.2.2: the first 32 bits of the fractional parts of the cube roots of the
// first 64 primes.
constexpr std::array<std::uint32_t, 64> kRound = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

constexpr std::uint32_t rotr(std::uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

class Sha256 {
 public:
  void update(const unsigned char* data, std::size_t size) {
    m_totalBytes += size;
    while (size > 0) {
      const std::size_t take = std::min<std::size_t>(size, 64 - m_fill);
      std::memcpy(m_block.data() + m_fill, data, take);
      m_fill += take;
      data += take;
      size -= take;
      if (m_fill == 64) {
        compress();
        m_fill = 0;
      }
    }
  }

  std::string hex() {
    // §5.1.1 padding: a 1 bit, zeros, then the message length in bits as 64-bit big endian.
    const std::uint64_t bits = m_totalBytes * 8;
    const unsigned char one = 0x80;
    update(&one, 1);
    const unsigned char zero = 0;
    while (m_fill != 56) update(&zero, 1);
    std::array<unsigned char, 8> len{};
    for (int i = 0; i < 8; ++i) len[static_cast<std::size_t>(i)] = static_cast<unsigned char>(bits >> (56 - 8 * i));
    update(len.data(), len.size());
    static constexpr char kDigits[] = "0123456789abcdef";
    std::string out;
    for (const std::uint32_t h : m_state) {
      for (int shift = 28; shift >= 0; shift -= 4) out.push_back(kDigits[(h >> shift) & 0xf]);
    }
    return out;
  }

 private:
  void compress() {  // §6.2.2
    std::array<std::uint32_t, 64> w{};
    for (std::size_t t = 0; t < 16; ++t) {
      w[t] = (std::uint32_t{m_block[4 * t]} << 24) | (std::uint32_t{m_block[4 * t + 1]} << 16) |
             (std::uint32_t{m_block[4 * t + 2]} << 8) | std::uint32_t{m_block[4 * t + 3]};
    }
    for (std::size_t t = 16; t < 64; ++t) {
      const std::uint32_t s0 = rotr(w[t - 15], 7) ^ rotr(w[t - 15], 18) ^ (w[t - 15] >> 3);
      const std::uint32_t s1 = rotr(w[t - 2], 17) ^ rotr(w[t - 2], 19) ^ (w[t - 2] >> 10);
      w[t] = w[t - 16] + s0 + w[t - 7] + s1;
    }
    auto [a, b, c, d, e, f, g, h] = m_state;
    for (std::size_t t = 0; t < 64; ++t) {
      const std::uint32_t t1 = h + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) + kRound[t] + w[t];
      const std::uint32_t t2 = (rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
      h = g;
      g = f;
      f = e;
      e = d + t1;
      d = c;
      c = b;
      b = a;
      a = t1 + t2;
    }
    const std::array<std::uint32_t, 8> add = {a, b, c, d, e, f, g, h};
    for (std::size_t i = 0; i < 8; ++i) m_state[i] += add[i];
  }

  // §5.3.3 initial hash value.
  std::array<std::uint32_t, 8> m_state = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                          0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
  std::array<unsigned char, 64> m_block{};
  std::size_t m_fill = 0;
  std::uint64_t m_totalBytes = 0;
};

}  // namespace

std::string sha256Hex(std::string_view bytes) {
  Sha256 s;
  s.update(reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size());
  return s.hex();
}

Expected<std::string> sha256File(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Error{path + ": cannot open for reading: " + std::strerror(errno)};
  Sha256 s;
  std::array<char, 1 << 16> buf{};
  while (in) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    const auto got = in.gcount();
    if (got > 0) s.update(reinterpret_cast<const unsigned char*>(buf.data()), static_cast<std::size_t>(got));
  }
  if (in.bad()) return Error{path + ": read error"};
  return s.hex();
}

}  // namespace pipestudio::remote
