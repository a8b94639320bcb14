/* ew_shorthand.h — short names for building elementwise formulas (series,
 * recurrences, polynomial evaluations) in the lowerings that write many of
 * them: lower/elementwise_unary.c, elementwise_special.c, special.c. Each
 * expands in a function with an `ir_graph *g` and a value `x` whose type the
 * constants K(v) take. Included only by .c files, after elementwise.h. */
#ifndef TPUC_LOWER_EW_SHORTHAND_H
#define TPUC_LOWER_EW_SHORTHAND_H

#define K(v) ew_splat(g, x, (v))
#define ADD(a, b) ir_binary(g, IR_ADD, (a), (b))
#define SUB(a, b) ir_binary(g, IR_SUB, (a), (b))
#define MUL(a, b) ir_binary(g, IR_MUL, (a), (b))
#define DIV(a, b) ir_binary(g, IR_DIV, (a), (b))
#define U(op, a) ir_unary(g, (op), (a))
#define SEL(c, a, b) ir_select(g, (c), (a), (b))
#define CMP(dir, a, b) ir_compare(g, (dir), (a), (b))
#define AND(a, b) ir_binary(g, IR_AND, (a), (b))
#define OR(a, b) ir_binary(g, IR_OR, (a), (b))

#endif
