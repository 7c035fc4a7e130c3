package langchaingo

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"unicode/utf8"

	"github.com/tmc/langchaingo/llms"

	"github.com/agentstore/agentstore"
	"github.com/agentstore/agentstore/repo"
)

// MetadataKey is the key of agentstore message metadata under which
// History keeps a message's langchaingo type and the fields that are not
// its content (see History.AddMessage).
const MetadataKey = "langchaingo"

// lcMeta is the value stored under MetadataKey. Type is always set; the
// other fields are set for the types that have them (a nil ToolCalls is
// left out, an empty one is stored as [], so both read back as written).
type lcMeta struct {
	Type             llms.ChatMessageType `json:"type"`
	Role             *string              `json:"role,omitempty"`
	Name             *string              `json:"name,omitempty"`
	ToolCallID       *string              `json:"tool_call_id,omitempty"`
	FunctionCall     *llms.FunctionCall   `json:"function_call,omitempty"`
	ToolCalls        *[]toolCall          `json:"tool_calls,omitempty"`
	ReasoningContent *string              `json:"reasoning_content,omitempty"`
}

// toolCall is llms.ToolCall as stored: a nil FunctionCall is null.
type toolCall struct {
	ID       string             `json:"id"`
	Type     string             `json:"type"`
	Function *llms.FunctionCall `json:"function"`
}

// ider is a tool message's GetID.
type ider interface{ GetID() string }

// encodeMessage maps a langchaingo message onto an agentstore message
// (role, content, metadata); see History.AddMessage.
func encodeMessage(cm llms.ChatMessage) (repo.Message, error) {
	if cm == nil {
		return repo.Message{}, fmt.Errorf("%w: nil message", agentstore.ErrInvalidInput)
	}
	if v := reflect.ValueOf(cm); v.Kind() == reflect.Pointer && v.IsNil() {
		return repo.Message{}, fmt.Errorf("%w: nil %T message", agentstore.ErrInvalidInput, cm)
	}
	var (
		role    repo.Role
		content string
		meta    = lcMeta{Type: cm.GetType()}
		texts   = map[string]string{}
	)
	switch v := cm.(type) {
	case *llms.AIChatMessage:
		return encodeMessage(*v)
	case *llms.HumanChatMessage:
		return encodeMessage(*v)
	case *llms.SystemChatMessage:
		return encodeMessage(*v)
	case *llms.GenericChatMessage:
		return encodeMessage(*v)
	case *llms.FunctionChatMessage:
		return encodeMessage(*v)
	case *llms.ToolChatMessage:
		return encodeMessage(*v)
	case llms.AIChatMessage:
		role, content = repo.RoleAssistant, v.Content
		if v.FunctionCall != nil {
			fc := *v.FunctionCall
			meta.FunctionCall = &fc
			texts["function call name"], texts["function call arguments"] = fc.Name, fc.Arguments
		}
		if v.ToolCalls != nil {
			tcs := make([]toolCall, len(v.ToolCalls))
			for i, tc := range v.ToolCalls {
				tcs[i] = toolCall{ID: tc.ID, Type: tc.Type}
				texts[fmt.Sprintf("tool call %d id", i)], texts[fmt.Sprintf("tool call %d type", i)] = tc.ID, tc.Type
				if tc.FunctionCall != nil {
					fc := *tc.FunctionCall
					tcs[i].Function = &fc
					texts[fmt.Sprintf("tool call %d function name", i)] = fc.Name
					texts[fmt.Sprintf("tool call %d function arguments", i)] = fc.Arguments
				}
			}
			meta.ToolCalls = &tcs
		}
		if v.ReasoningContent != "" {
			rc := v.ReasoningContent
			meta.ReasoningContent = &rc
			texts["reasoning content"] = rc
		}
	case llms.HumanChatMessage:
		role, content = repo.RoleUser, v.Content
	case llms.SystemChatMessage:
		role, content = repo.RoleSystem, v.Content
	case llms.GenericChatMessage:
		role, content = genericRole(v.Role), v.Content
		r, n := v.Role, v.Name
		meta.Role, meta.Name = &r, &n
		texts["role"], texts["name"] = r, n
	case llms.FunctionChatMessage:
		role, content = repo.RoleTool, v.Content
		n := v.Name
		meta.Name = &n
		texts["name"] = n
	case llms.ToolChatMessage:
		role, content = repo.RoleTool, v.Content
		id := v.ID
		meta.ToolCallID = &id
		texts["tool call id"] = id
	default:
		// Another implementation: its type, content and the name or id
		// its type has.
		content = cm.GetContent()
		switch meta.Type {
		case llms.ChatMessageTypeAI:
			role = repo.RoleAssistant
		case llms.ChatMessageTypeHuman:
			role = repo.RoleUser
		case llms.ChatMessageTypeSystem:
			role = repo.RoleSystem
		case llms.ChatMessageTypeGeneric:
			role = repo.RoleUser
			var r, n string
			if nm, ok := cm.(llms.Named); ok {
				n = nm.GetName()
			}
			meta.Role, meta.Name = &r, &n
			texts["name"] = n
		case llms.ChatMessageTypeFunction:
			role = repo.RoleTool
			var n string
			if nm, ok := cm.(llms.Named); ok {
				n = nm.GetName()
			}
			meta.Name = &n
			texts["name"] = n
		case llms.ChatMessageTypeTool:
			role = repo.RoleTool
			var id string
			if i, ok := cm.(ider); ok {
				id = i.GetID()
			}
			meta.ToolCallID = &id
			texts["tool call id"] = id
		default:
			return repo.Message{}, fmt.Errorf("%w: %w %q (%T)", agentstore.ErrInvalidInput,
				llms.ErrUnexpectedChatMessageType, truncate(string(meta.Type)), cm)
		}
	}
	if !utf8.ValidString(string(meta.Type)) {
		return repo.Message{}, fmt.Errorf("%w: message type is not valid UTF-8", agentstore.ErrInvalidInput)
	}
	texts["content"] = content
	for field, s := range texts {
		if !utf8.ValidString(s) {
			return repo.Message{}, fmt.Errorf("%w: %s message: %s is not valid UTF-8", agentstore.ErrInvalidInput, meta.Type, field)
		}
	}
	c, err := marshal(content)
	if err != nil {
		return repo.Message{}, err
	}
	md, err := marshal(map[string]lcMeta{MetadataKey: meta})
	if err != nil {
		return repo.Message{}, err
	}
	return repo.Message{Role: role, Content: c, Metadata: md}, nil
}

// genericRole is the agentstore role of a generic message with role r.
func genericRole(r string) repo.Role {
	switch strings.ToLower(strings.TrimSpace(r)) {
	case "human":
		return repo.RoleUser
	case "ai":
		return repo.RoleAssistant
	}
	if role, err := repo.ParseRole(r); err == nil {
		return role
	}
	return repo.RoleUser
}

// marshal is json.Marshal without HTML escaping (the stored JSON stays
// readable: <, > and & are kept as they are).
func marshal(v any) (json.RawMessage, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, fmt.Errorf("%w: %v", agentstore.ErrInvalidInput, err)
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

func truncate(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}

// decodeMessage maps a stored agentstore message back onto a langchaingo
// message; see History.Messages.
func decodeMessage(m repo.Message) (llms.ChatMessage, error) {
	meta, ok, err := readMeta(m.Metadata)
	if err != nil {
		return nil, err
	}
	text, err := contentText(m.Content)
	if err != nil {
		return nil, err
	}
	if !ok { // appended by another client: read it by role
		switch m.Role {
		case repo.RoleUser:
			return llms.HumanChatMessage{Content: text}, nil
		case repo.RoleAssistant:
			return llms.AIChatMessage{Content: text}, nil
		case repo.RoleSystem:
			return llms.SystemChatMessage{Content: text}, nil
		case repo.RoleTool:
			return llms.ToolChatMessage{Content: text}, nil
		}
		return nil, corrupt("unknown role %q", m.Role)
	}
	switch meta.Type {
	case llms.ChatMessageTypeAI:
		out := llms.AIChatMessage{Content: text}
		if meta.FunctionCall != nil {
			fc := *meta.FunctionCall
			out.FunctionCall = &fc
		}
		if meta.ToolCalls != nil {
			out.ToolCalls = make([]llms.ToolCall, len(*meta.ToolCalls))
			for i, tc := range *meta.ToolCalls {
				out.ToolCalls[i] = llms.ToolCall{ID: tc.ID, Type: tc.Type, FunctionCall: tc.Function}
			}
		}
		if meta.ReasoningContent != nil {
			out.ReasoningContent = *meta.ReasoningContent
		}
		return out, nil
	case llms.ChatMessageTypeHuman:
		return llms.HumanChatMessage{Content: text}, nil
	case llms.ChatMessageTypeSystem:
		return llms.SystemChatMessage{Content: text}, nil
	case llms.ChatMessageTypeGeneric:
		return llms.GenericChatMessage{Content: text, Role: deref(meta.Role), Name: deref(meta.Name)}, nil
	case llms.ChatMessageTypeFunction:
		return llms.FunctionChatMessage{Content: text, Name: deref(meta.Name)}, nil
	case llms.ChatMessageTypeTool:
		return llms.ToolChatMessage{Content: text, ID: deref(meta.ToolCallID)}, nil
	}
	return nil, corrupt("unknown %s type %q", MetadataKey, truncate(string(meta.Type)))
}

// readMeta returns the value under MetadataKey, and whether there is one.
// Metadata that is absent or not a JSON object has none.
func readMeta(md json.RawMessage) (lcMeta, bool, error) {
	var obj map[string]json.RawMessage
	if len(md) == 0 || json.Unmarshal(md, &obj) != nil {
		return lcMeta{}, false, nil
	}
	raw, ok := obj[MetadataKey]
	if !ok {
		return lcMeta{}, false, nil
	}
	var meta lcMeta
	if err := json.Unmarshal(raw, &meta); err != nil || meta.Type == "" {
		return lcMeta{}, false, corrupt("metadata %q is not an object with a type", MetadataKey)
	}
	return meta, true, nil
}

// contentText is the text of agentstore message content: a JSON string as
// it is, or the concatenated text of the "text" blocks of an array.
func contentText(c json.RawMessage) (string, error) {
	var s string
	if err := json.Unmarshal(c, &s); err == nil {
		return s, nil
	}
	var blocks []json.RawMessage
	if err := json.Unmarshal(c, &blocks); err != nil {
		return "", corrupt("content is neither a JSON string nor an array")
	}
	var b strings.Builder
	for _, raw := range blocks {
		var blk struct {
			Type string `json:"type"`
			Text string `json:"text"`
		}
		if json.Unmarshal(raw, &blk) == nil && blk.Type == "text" {
			b.WriteString(blk.Text)
		}
	}
	return b.String(), nil
}

func corrupt(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{agentstore.ErrCorruptRow}, args...)...)
}

func deref(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}
