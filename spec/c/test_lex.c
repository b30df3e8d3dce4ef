/* mil/lex.c: the tokens of a MIL fragment with their kinds, texts, lines and columns
 * (comments of all three kinds and white space skipped, "->", hex floats and signed words
 * as numbers, escaped quotes inside strings), and the unterminated-string error that cites
 * source:line:column, quotes the line and puts a caret under the token. */
#include <stdio.h>
#include <string.h>

#include "ane_core/mil/lex.h"
#include "check.h"

typedef struct {
    token_kind kind;
    const char *text;
    int line, column;
} expected_token;

int main(void) {
    const char *text =
        "program(1.3)\n"
        "// a line comment\n"
        "  func main<ios18>(tensor<fp16, [1, 64]> x) {\n"
        "    # another\n"
        "    /* a block\n"
        "       over lines */ y = mul(x = x, y = 0x1.8p-3, z = -inf, w = 1e-5, s = \"a\\\"b\");\n"
        "  } -> (y);\n";
    const expected_token expected[] = {
        { T_IDENT, "program", 1, 1 }, { T_PUNCT, "(", 1, 8 },     { T_NUMBER, "1.3", 1, 9 },  { T_PUNCT, ")", 1, 12 },
        { T_IDENT, "func", 3, 3 },    { T_IDENT, "main", 3, 8 },  { T_PUNCT, "<", 3, 12 },    { T_IDENT, "ios18", 3, 13 },
        { T_PUNCT, ">", 3, 18 },      { T_PUNCT, "(", 3, 19 },    { T_IDENT, "tensor", 3, 20 }, { T_PUNCT, "<", 3, 26 },
        { T_IDENT, "fp16", 3, 27 },   { T_PUNCT, ",", 3, 31 },    { T_PUNCT, "[", 3, 33 },    { T_NUMBER, "1", 3, 34 },
        { T_PUNCT, ",", 3, 35 },      { T_NUMBER, "64", 3, 37 },  { T_PUNCT, "]", 3, 39 },    { T_PUNCT, ">", 3, 40 },
        { T_IDENT, "x", 3, 42 },      { T_PUNCT, ")", 3, 43 },    { T_PUNCT, "{", 3, 45 },    { T_IDENT, "y", 6, 22 },
        { T_PUNCT, "=", 6, 24 },      { T_IDENT, "mul", 6, 26 },  { T_PUNCT, "(", 6, 29 },    { T_IDENT, "x", 6, 30 },
        { T_PUNCT, "=", 6, 32 },      { T_IDENT, "x", 6, 34 },    { T_PUNCT, ",", 6, 35 },    { T_IDENT, "y", 6, 37 },
        { T_PUNCT, "=", 6, 39 },      { T_NUMBER, "0x1.8p-3", 6, 41 }, { T_PUNCT, ",", 6, 49 }, { T_IDENT, "z", 6, 51 },
        { T_PUNCT, "=", 6, 53 },      { T_NUMBER, "-inf", 6, 55 }, { T_PUNCT, ",", 6, 59 },   { T_IDENT, "w", 6, 61 },
        { T_PUNCT, "=", 6, 63 },      { T_NUMBER, "1e-5", 6, 65 }, { T_PUNCT, ",", 6, 69 },   { T_IDENT, "s", 6, 71 },
        { T_PUNCT, "=", 6, 73 },      { T_STRING, "\"a\\\"b\"", 6, 75 }, { T_PUNCT, ")", 6, 81 }, { T_PUNCT, ";", 6, 82 },
        { T_PUNCT, "}", 7, 3 },       { T_ARROW, "->", 7, 5 },    { T_PUNCT, "(", 7, 8 },     { T_IDENT, "y", 7, 9 },
        { T_PUNCT, ")", 7, 10 },      { T_PUNCT, ";", 7, 11 },    { T_EOF, "", 8, 1 },
    };
    ane_error err;
    ane_error_clear(&err);
    mil_lexer lex;
    mil_lex_init(&lex, text, strlen(text), "fragment.mil", &err);
    size_t n = sizeof expected / sizeof *expected, matched = 0;
    for (size_t i = 0; i < n; i++) {
        const token *t = &lex.tok;
        int same = t->kind == expected[i].kind && t->length == strlen(expected[i].text) &&
                   memcmp(t->start, expected[i].text, t->length) == 0 && t->line == expected[i].line &&
                   t->column == expected[i].column;
        CHECK(same, "token %zu: kind %d '%.*s' at %d:%d, expected kind %d '%s' at %d:%d", i, t->kind, (int)t->length,
              t->start, t->line, t->column, expected[i].kind, expected[i].text, expected[i].line, expected[i].column);
        matched += same;
        if (!same) break;
        mil_lex_next(&lex);
    }
    CHECK(matched == n && !mil_lex_failed(&lex), "%zu of %zu tokens as expected", matched, n);

    const char *broken = "x = 1;\n  s = \"never closed\n";
    mil_lex_init(&lex, broken, strlen(broken), "broken.mil", &err);
    while (!mil_lex_failed(&lex) && lex.tok.kind != T_EOF) mil_lex_next(&lex);
    CHECK(mil_lex_failed(&lex) && err.status == ANE_ERR_FORMAT, "an unterminated string fails");
    CHECK(strncmp(err.message, "broken.mil:2:7: unterminated string\n", 36) == 0, "the error cites line and column: %s",
          err.message);
    CHECK(strstr(err.message, "  s = \"never closed") && strstr(err.message, "\n          ^"),
          "the error quotes the line with a caret under the string: %s", err.message);
    return check_summary("lex");
}
