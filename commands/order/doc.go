// Package order is the order domain, free of transport: decoding and
// validating a create-order request (with the interface's messages word for
// word and the JSON path of the offending field), pricing in decimal
// arithmetic, and the order decider's pure Decide and Evolve functions.
package order
