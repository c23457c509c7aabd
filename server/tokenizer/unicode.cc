#include "server/tokenizer/unicode.h"

#include <unicode/bytestream.h>
#include <unicode/locid.h>
#include <unicode/normalizer2.h>
#include <unicode/uchar.h>
#include <unicode/unistr.h>

#include "base/check.h"

namespace tpserve {
namespace {

const icu::Normalizer2* GetNormalizer(NormalizationForm form) {
  UErrorCode status = U_ZERO_ERROR;
  const icu::Normalizer2* n = nullptr;
  switch (form) {
    case NormalizationForm::kNfc:
      n = icu::Normalizer2::getNFCInstance(status);
      break;
    case NormalizationForm::kNfd:
      n = icu::Normalizer2::getNFDInstance(status);
      break;
    case NormalizationForm::kNfkc:
      n = icu::Normalizer2::getNFKCInstance(status);
      break;
    case NormalizationForm::kNfkd:
      n = icu::Normalizer2::getNFKDInstance(status);
      break;
  }
  TPSERVE_CHECK(U_SUCCESS(status) && n != nullptr);  // ICU data ships with libicu.
  return n;
}

// Text that every normalization form leaves unchanged: ASCII for all forms, and
// for NFC anything below U+0300 (no combining marks, nothing to compose).
bool IsTriviallyNormalized(NormalizationForm form, std::string_view text) {
  const unsigned char limit = form == NormalizationForm::kNfc ? 0xCC : 0x80;
  for (unsigned char c : text) {
    if (c >= limit) return false;  // 0xCC leads U+0300 and above
  }
  return true;
}

}  // namespace

bool IsWhitespace(char32_t cp) { return u_hasBinaryProperty(cp, UCHAR_WHITE_SPACE); }

bool IsNumeric(char32_t cp) {
  const int8_t type = u_charType(cp);
  return type == U_DECIMAL_DIGIT_NUMBER || type == U_LETTER_NUMBER || type == U_OTHER_NUMBER;
}

bool IsAlphanumeric(char32_t cp) {
  return u_hasBinaryProperty(cp, UCHAR_ALPHABETIC) || IsNumeric(cp);
}

bool IsWordChar(char32_t cp) {
  if (u_hasBinaryProperty(cp, UCHAR_ALPHABETIC) || u_hasBinaryProperty(cp, UCHAR_JOIN_CONTROL)) {
    return true;
  }
  const int8_t type = u_charType(cp);
  return type == U_NON_SPACING_MARK || type == U_COMBINING_SPACING_MARK ||
         type == U_ENCLOSING_MARK || type == U_DECIMAL_DIGIT_NUMBER ||
         type == U_CONNECTOR_PUNCTUATION;
}

std::string NormalizeUnicode(NormalizationForm form, std::string_view text) {
  if (IsTriviallyNormalized(form, text)) return std::string(text);
  const icu::Normalizer2* n = GetNormalizer(form);
  UErrorCode status = U_ZERO_ERROR;
  const icu::StringPiece piece(text.data(), static_cast<int32_t>(text.size()));
  if (n->isNormalizedUTF8(piece, status) && U_SUCCESS(status)) return std::string(text);
  status = U_ZERO_ERROR;
  std::string out;
  icu::StringByteSink<std::string> sink(&out, static_cast<int32_t>(text.size()));
  n->normalizeUTF8(0, piece, sink, nullptr, status);
  TPSERVE_CHECK(U_SUCCESS(status));  // input is validated UTF-8
  return out;
}

std::string ToLowercase(std::string_view text) {
  icu::UnicodeString u = icu::UnicodeString::fromUTF8(
      icu::StringPiece(text.data(), static_cast<int32_t>(text.size())));
  u.toLower(icu::Locale::getRoot());
  std::string out;
  u.toUTF8String(out);
  return out;
}

}  // namespace tpserve
