/* objc_msgSend and the autorelease-pool entry points as Apple's runtime exports them, for
 * building the `ane` backend against the test double on Linux. */
#ifndef ANE_DOUBLE_OBJC_MESSAGE_H
#define ANE_DOUBLE_OBJC_MESSAGE_H

#include "runtime.h"

/* Declared without arguments (OBJC_OLD_DISPATCH_PROTOTYPES=0): callers cast it to the exact
 * prototype of the message they send. */
void objc_msgSend(void);
void *objc_autoreleasePoolPush(void);
void objc_autoreleasePoolPop(void *pool);

#endif
