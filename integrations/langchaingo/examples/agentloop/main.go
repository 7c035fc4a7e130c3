// Command agentloop is a tool-calling agent loop over langchaingo whose
// conversation is kept in agentstore by the langchaingo History: each run
// asks one question in a session, the model calls a tool, the loop runs it
// and feeds the result back until the model answers, and every message
// (the question, the model's tool calls, the tool results, the answer) is
// stored as it happens. Run it again with the printed session id to go on
// with the same conversation, from the same or another process.
//
//	go run ./examples/agentloop "What's the weather in Paris?"
//	go run ./examples/agentloop -session <id> "And in Oslo?"
//	go run ./examples/agentloop -dsn postgres://user@host/db "..."
//
// The model is a small scripted stand-in (scriptedModel) so the example runs
// without network or API key; replace it with any llms.Model (for example
// openai.New()) for a real one.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"strings"

	"github.com/google/uuid"
	"github.com/tmc/langchaingo/llms"

	"github.com/agentstore/agentstore"
	lcstore "github.com/agentstore/agentstore/integrations/langchaingo"
)

func main() {
	dsn := flag.String("dsn", "sqlite:agentloop.db", "agentstore DSN: sqlite:PATH or postgres://...")
	session := flag.String("session", "", "session id of a conversation to go on with (default: a new one)")
	flag.Parse()
	question := strings.Join(flag.Args(), " ")
	if question == "" {
		question = "What's the weather in Paris?"
	}
	if err := run(context.Background(), os.Stdout, *dsn, *session, question); err != nil {
		log.Fatal(err)
	}
}

// maxSteps bounds the model calls of one question.
const maxSteps = 5

// tools are the tools offered to the model.
var tools = []llms.Tool{{
	Type: "function",
	Function: &llms.FunctionDefinition{
		Name:        "weather",
		Description: "Current weather of a city",
		Parameters: map[string]any{
			"type":       "object",
			"properties": map[string]any{"city": map[string]any{"type": "string"}},
			"required":   []string{"city"},
		},
	},
}}

// run opens (and migrates) the store at dsn, asks question in the session
// (a new one when session is ""), and prints the answer and the stored
// transcript to out.
func run(ctx context.Context, out io.Writer, dsn, session, question string, opts ...agentstore.Option) error {
	st, err := agentstore.Open(ctx, dsn, opts...)
	if err != nil {
		return err
	}
	defer st.Close()
	if err := st.Migrate(ctx); err != nil {
		return err
	}
	var hopts []lcstore.Option
	if session != "" {
		id, err := uuid.Parse(session)
		if err != nil {
			return fmt.Errorf("-session: %w", err)
		}
		hopts = append(hopts, lcstore.WithSessionID(id))
	}
	h := lcstore.NewHistory(st, hopts...)
	answer, err := ask(ctx, h, scriptedModel{}, question)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "assistant: %s\n\nsession %s:\n", answer, h.SessionID())
	msgs, err := h.Messages(ctx)
	if err != nil {
		return err
	}
	for _, m := range msgs {
		fmt.Fprintf(out, "  %-6s %s\n", m.GetType(), describe(m))
	}
	return nil
}

// ask is the agent loop: it stores the question, then calls the model with
// the stored conversation and stores its reply, running the tools the reply
// calls and storing their results, until the model answers without a tool
// call.
func ask(ctx context.Context, h *lcstore.History, model llms.Model, question string) (string, error) {
	msgs, err := h.Messages(ctx)
	if err != nil {
		return "", err
	}
	if len(msgs) == 0 {
		sys := llms.SystemChatMessage{Content: "You answer weather questions with the weather tool."}
		if err := h.AddMessage(ctx, sys); err != nil {
			return "", err
		}
	}
	if err := h.AddUserMessage(ctx, question); err != nil {
		return "", err
	}
	for range maxSteps {
		msgs, err := h.Messages(ctx)
		if err != nil {
			return "", err
		}
		resp, err := model.GenerateContent(ctx, toMessageContent(msgs), llms.WithTools(tools))
		if err != nil {
			return "", err
		}
		if len(resp.Choices) == 0 {
			return "", errors.New("the model returned no choice")
		}
		c := resp.Choices[0]
		reply := llms.AIChatMessage{Content: c.Content, ToolCalls: c.ToolCalls, ReasoningContent: c.ReasoningContent}
		if err := h.AddMessage(ctx, reply); err != nil {
			return "", err
		}
		if len(c.ToolCalls) == 0 {
			return c.Content, nil
		}
		for _, tc := range c.ToolCalls {
			if err := h.AddMessage(ctx, llms.ToolChatMessage{ID: tc.ID, Content: runTool(tc)}); err != nil {
				return "", err
			}
		}
	}
	return "", fmt.Errorf("no answer after %d model calls", maxSteps)
}

// runTool runs one tool call and returns its result (an error is a result
// too: the model sees it).
func runTool(tc llms.ToolCall) string {
	if tc.FunctionCall == nil || tc.FunctionCall.Name != "weather" {
		return "error: unknown tool"
	}
	var args struct{ City string }
	if err := json.Unmarshal([]byte(tc.FunctionCall.Arguments), &args); err != nil {
		return "error: " + err.Error()
	}
	forecast := map[string]string{"paris": "18°C and sunny", "oslo": "4°C and snowing"}
	if f, ok := forecast[strings.ToLower(args.City)]; ok {
		return f
	}
	return "no data for " + args.City
}

// toMessageContent turns the stored conversation into the model's input:
// text parts, the AI messages' tool calls and the tool results (named after
// the call they answer).
func toMessageContent(msgs []llms.ChatMessage) []llms.MessageContent {
	names := map[string]string{} // tool call id -> function name
	out := make([]llms.MessageContent, 0, len(msgs))
	for _, m := range msgs {
		switch m := m.(type) {
		case llms.AIChatMessage:
			mc := llms.MessageContent{Role: llms.ChatMessageTypeAI}
			if m.Content != "" {
				mc.Parts = append(mc.Parts, llms.TextContent{Text: m.Content})
			}
			for _, tc := range m.ToolCalls {
				if tc.FunctionCall != nil {
					names[tc.ID] = tc.FunctionCall.Name
				}
				mc.Parts = append(mc.Parts, tc)
			}
			out = append(out, mc)
		case llms.ToolChatMessage:
			out = append(out, llms.MessageContent{Role: llms.ChatMessageTypeTool, Parts: []llms.ContentPart{
				llms.ToolCallResponse{ToolCallID: m.ID, Name: names[m.ID], Content: m.Content},
			}})
		default:
			out = append(out, llms.TextParts(m.GetType(), m.GetContent()))
		}
	}
	return out
}

// describe is one line of the transcript.
func describe(m llms.ChatMessage) string {
	switch m := m.(type) {
	case llms.AIChatMessage:
		if len(m.ToolCalls) > 0 {
			var calls []string
			for _, tc := range m.ToolCalls {
				calls = append(calls, fmt.Sprintf("%s %s(%s)", tc.ID, tc.FunctionCall.Name, tc.FunctionCall.Arguments))
			}
			return "calls " + strings.Join(calls, ", ")
		}
	case llms.ToolChatMessage:
		return fmt.Sprintf("%s -> %s", m.ID, m.Content)
	}
	return m.GetContent()
}

// scriptedModel stands in for an LLM: after a question it calls the weather
// tool for the capitalised word the question ends with; after a tool result
// it answers with it.
type scriptedModel struct{}

// GenerateContent implements llms.Model.
func (scriptedModel) GenerateContent(_ context.Context, msgs []llms.MessageContent, _ ...llms.CallOption) (*llms.ContentResponse, error) {
	if len(msgs) == 0 {
		return nil, errors.New("no messages")
	}
	last := msgs[len(msgs)-1]
	switch last.Role {
	case llms.ChatMessageTypeHuman:
		text := ""
		for _, p := range last.Parts {
			if t, ok := p.(llms.TextContent); ok {
				text += t.Text
			}
		}
		words := strings.Fields(strings.Trim(text, "?!. "))
		city := "nowhere"
		if len(words) > 0 {
			city = words[len(words)-1]
		}
		args, _ := json.Marshal(map[string]string{"city": city})
		return &llms.ContentResponse{Choices: []*llms.ContentChoice{{
			ToolCalls: []llms.ToolCall{{ID: fmt.Sprintf("call_%d", len(msgs)), Type: "function",
				FunctionCall: &llms.FunctionCall{Name: "weather", Arguments: string(args)}}},
		}}}, nil
	case llms.ChatMessageTypeTool:
		r, _ := last.Parts[0].(llms.ToolCallResponse)
		var call llms.ToolCall // the call this result answers
		for _, m := range msgs {
			for _, p := range m.Parts {
				if tc, ok := p.(llms.ToolCall); ok && tc.ID == r.ToolCallID {
					call = tc
				}
			}
		}
		var args struct{ City string }
		if call.FunctionCall != nil {
			_ = json.Unmarshal([]byte(call.FunctionCall.Arguments), &args)
		}
		return &llms.ContentResponse{Choices: []*llms.ContentChoice{{
			Content: fmt.Sprintf("In %s it is %s.", args.City, r.Content),
		}}}, nil
	}
	return nil, fmt.Errorf("nothing to answer after a %s message", last.Role)
}

// Call implements llms.Model.
func (m scriptedModel) Call(ctx context.Context, prompt string, opts ...llms.CallOption) (string, error) {
	return llms.GenerateFromSinglePrompt(ctx, m, prompt, opts...)
}
