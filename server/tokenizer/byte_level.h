// GPT-2's reversible byte-to-unicode alphabet, used by the ByteLevel pre-tokenizer
// and decoder: printable Latin-1 bytes map to themselves, the rest to U+0100 on.
#ifndef TPSERVE_SERVER_TOKENIZER_BYTE_LEVEL_H_
#define TPSERVE_SERVER_TOKENIZER_BYTE_LEVEL_H_

#include <optional>
#include <string>
#include <string_view>

namespace tpserve {

char32_t ByteToUnicode(unsigned char byte);

// The byte a code point stands for, or nullopt for code points outside the alphabet.
std::optional<unsigned char> UnicodeToByte(char32_t cp);

// Maps a token written in the alphabet back to raw bytes; nullopt when any of its
// characters is outside the alphabet. `token` must be valid UTF-8.
std::optional<std::string> ByteLevelToBytes(std::string_view token);

// Appends the bytes of `token` to *out and returns true; returns false and leaves
// *out unchanged when a character is outside the alphabet.
bool AppendByteLevelBytes(std::string_view token, std::string* out);

}  // namespace tpserve

#endif  // TPSERVE_SERVER_TOKENIZER_BYTE_LEVEL_H_
