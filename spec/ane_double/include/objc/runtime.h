/* The Objective-C runtime names the `ane` backend uses, declared as Apple's <objc/runtime.h>
 * declares them, for building the backend on Linux against the test double
 * (spec/ane_double). The double's runtime defines them. */
#ifndef ANE_DOUBLE_OBJC_RUNTIME_H
#define ANE_DOUBLE_OBJC_RUNTIME_H

#include <stdbool.h>

typedef struct objc_class *Class;
typedef struct objc_object { Class isa; } *id;
typedef struct objc_selector *SEL;
typedef struct objc_method *Method;
typedef void (*IMP)(void); /* as with OBJC_OLD_DISPATCH_PROTOTYPES=0 */
/* As objc4's <objc/objc.h> has it: bool (type code 'B') where OBJC_BOOL_IS_BOOL (arm64),
 * signed char ('c') on x86-64. The double stands for the Mac of the architecture it runs on. */
#if defined(__x86_64__)
typedef signed char BOOL;
#define YES ((BOOL)1)
#define NO ((BOOL)0)
#else
typedef bool BOOL;
#define YES true
#define NO false
#endif
#define nil ((id)0)

Class objc_getClass(const char *name);
SEL sel_registerName(const char *name);
const char *sel_getName(SEL sel);
Class object_getClass(id object);
const char *class_getName(Class cls);
Method class_getInstanceMethod(Class cls, SEL name);
Method class_getClassMethod(Class cls, SEL name);
const char *method_getTypeEncoding(Method method);
IMP method_getImplementation(Method method);
BOOL class_addMethod(Class cls, SEL name, IMP imp, const char *types);
Class objc_allocateClassPair(Class superclass, const char *name, unsigned long extra_bytes);
void objc_registerClassPair(Class cls);
id class_createInstance(Class cls, unsigned long extra_bytes);
void *object_getIndexedIvars(id object);

#endif
