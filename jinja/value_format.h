// Python's text forms of values: str() and repr() of floats and strings, which
// Value::Str() and Value::Repr() build on and tojson reuses for numbers.
#ifndef TPSERVE_JINJA_VALUE_FORMAT_H_
#define TPSERVE_JINJA_VALUE_FORMAT_H_

#include <string>
#include <string_view>

namespace tpserve::jinja {

// repr(float): the shortest text that reads back to `f` ("1.0", "1e-05",
// "1e+16", "inf", "nan").
std::string PyFloatRepr(double f);
// repr(str): quoted with ' unless the text holds ' and no ", escaping
// backslashes, the quote and unprintable characters as Python does.
std::string PyStringRepr(std::string_view s);

}  // namespace tpserve::jinja

#endif  // TPSERVE_JINJA_VALUE_FORMAT_H_
