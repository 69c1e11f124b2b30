package request

import (
	"hash/maphash"
	"strconv"
)

// MaxBlocks bounds the blocks ParseBlocks gives: a longer prompt's later
// blocks are left out (what explains a cache write is nearly always early
// in the prompt, and a bound keeps a hostile body from costing more).
const MaxBlocks = 1024

// Section is the part of the prompt a block sits in, in prefix order.
type Section uint8

const (
	SectionTools Section = iota
	SectionSystem
	SectionMessages
)

var sectionNames = [...]string{"tools", "system", "messages"}

func (s Section) String() string { return sectionNames[s] }

// Block is one block of a prompt in the API's prefix order: a tool, a
// system block, or a message's content block.
type Block struct {
	// Hash is a hash of the model and of every block up to and including
	// this one, as the prefix keys hash them (cache_control left out):
	// two prompts' blocks at the same place have the same Hash exactly
	// when their prompts agree up to there. It is a fast hash with a
	// seed of this process: compare it only within one process.
	Hash uint64
	// Tokens is the estimated tokens of the prompt up to and including
	// this block.
	Tokens int
	// Section and Index are where the block sits: the tool's index, the
	// system block's index (0 for a string system prompt), or the
	// message's index (every block of a message has its message's).
	Section Section
	Index   int
	// Breakpoint says the block carries a cache_control breakpoint (or
	// takes the top-level one, as the last cacheable block).
	Breakpoint bool
	// Lookback says a cache read may end after the block: it is a
	// breakpoint's or ends a position in one's lookback window
	// (LookbackPositions), where the API looks for an entry to read.
	Lookback bool
}

// Position names where b sits, as "tools[3]", "system[0]" or
// "messages[5]".
func (b Block) Position() string { return b.Section.String() + "[" + strconv.Itoa(b.Index) + "]" }

// blockSeed seeds every Block.Hash of this process.
var blockSeed = maphash.MakeSeed()
