/* base/text.c: printf-style appends across many buffer growths give the same text as
 * snprintf into one large buffer; byte appends keep embedded NULs and the length counts them. */
#include <stdio.h>
#include <string.h>

#include "ane_core/base/text.h"
#include "check.h"

int main(void) {
    static char reference[1 << 20];
    size_t used = 0;
    ane_text text = { 0 };
    for (int i = 0; i < 20000; i++) {
        ane_text_append(&text, "%%%d:%s/%.3f;", i, i % 3 ? "fp16" : "tensor<fp32, [1, 768, 1, 256]>", i / 7.0);
        used += (size_t)snprintf(reference + used, sizeof reference - used, "%%%d:%s/%.3f;", i,
                                 i % 3 ? "fp16" : "tensor<fp32, [1, 768, 1, 256]>", i / 7.0);
    }
    CHECK(!text.failed, "no allocation failed");
    CHECK(text.length == used, "length %zu, the reference %zu", text.length, used);
    CHECK(text.data && memcmp(text.data, reference, used) == 0 && text.data[text.length] == '\0',
          "the text equals snprintf's, NUL-terminated");
    ane_text_free(&text);
    CHECK(text.data == NULL && text.length == 0, "a freed text is empty");

    const char bytes[] = { 'a', 0, 'b', 0, 0, 'c' };
    ane_text_append_bytes(&text, bytes, sizeof bytes);
    ane_text_append(&text, "%s", "");
    CHECK(text.length == sizeof bytes && memcmp(text.data, bytes, sizeof bytes) == 0, "embedded NULs are kept");
    ane_text_free(&text);
    return check_summary("text");
}
