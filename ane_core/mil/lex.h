/* The MIL lexer: tokens (identifiers, numbers, strings, punctuation, "->") with their line
 * and column, comments and white space skipped, and errors that quote the offending line
 * with a caret. The parser (parse.c) reads one token of lookahead from it. */
#ifndef ANE_MIL_LEX_H
#define ANE_MIL_LEX_H

#include <stddef.h>

#include "../base/status.h"

typedef enum { T_EOF, T_IDENT, T_NUMBER, T_STRING, T_PUNCT, T_ARROW } token_kind;

typedef struct token {
    token_kind kind;
    const char *start;
    size_t length;
    int line, column;
    const char *line_start;
} token;

typedef struct mil_lexer {
    const char *text, *end, *cursor;
    int line;
    const char *line_start;
    token tok;                /* the current token */
    const char *source;       /* the file name errors cite */
    ane_error *err;
    ane_status status;        /* the first failure of the lexer or its parser */
} mil_lexer;

/* Starts at the first token of text[0..length). */
void mil_lex_init(mil_lexer *lex, const char *text, size_t length, const char *source, ane_error *err);
/* Moves to the next token. */
void mil_lex_next(mil_lexer *lex);
int mil_lex_failed(const mil_lexer *lex);
/* Records the first error, at a token: "<source>:<line>:<col>: message", the line, a caret. */
__attribute__((format(printf, 3, 4))) void mil_lex_fail_at(mil_lexer *lex, const token *at, const char *format, ...);

int mil_lex_is_punct(const mil_lexer *lex, char c);
int mil_lex_is_word(const mil_lexer *lex, const char *word);
/* "'text'" of a token (at most 40 characters), or "end of input". */
const char *mil_lex_describe(const token *t, char *buf, size_t size);
/* Consumes punctuation c, or fails naming the context and what was found. */
int mil_lex_expect_punct(mil_lexer *lex, char c, const char *context);
/* Consumes punctuation c when it is next. */
int mil_lex_accept_punct(mil_lexer *lex, char c);
/* Copies an identifier into buf (which holds `size` bytes) and consumes it, or fails. */
int mil_lex_expect_ident(mil_lexer *lex, char *buf, size_t size, const char *what);

#endif
