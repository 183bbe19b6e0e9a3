package rpc

import "context"

// Typed calls of thrum's API. Each sends one request and decodes its
// result; errors are *Error values with their JSON-RPC code.

func call[R any](ctx context.Context, c *Client, method string, p any) (*R, error) {
	var r R
	if err := c.Call(ctx, method, p, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// Health calls the "health" method.
func (c *Client) Health(ctx context.Context, p *HealthParams) (*HealthResult, error) {
	return call[HealthResult](ctx, c, MethodHealth, p)
}

// Auth calls the "auth" method.
func (c *Client) Auth(ctx context.Context, p *AuthParams) (*AuthResult, error) {
	return call[AuthResult](ctx, c, MethodAuth, p)
}

// RegisterAgent calls the "agent.register" method.
func (c *Client) RegisterAgent(ctx context.Context, p *RegisterAgentParams) (*RegisterAgentResult, error) {
	return call[RegisterAgentResult](ctx, c, MethodAgentRegister, p)
}

// ListAgents calls the "agent.list" method.
func (c *Client) ListAgents(ctx context.Context, p *ListAgentsParams) (*ListAgentsResult, error) {
	return call[ListAgentsResult](ctx, c, MethodAgentList, p)
}

// Whoami calls the "agent.whoami" method.
func (c *Client) Whoami(ctx context.Context, p *WhoamiParams) (*WhoamiResult, error) {
	return call[WhoamiResult](ctx, c, MethodAgentWhoami, p)
}

// ListContext calls the "agent.listContext" method.
func (c *Client) ListContext(ctx context.Context, p *ListContextParams) (*ListContextResult, error) {
	return call[ListContextResult](ctx, c, MethodAgentListContext, p)
}

// DeleteAgent calls the "agent.delete" method.
func (c *Client) DeleteAgent(ctx context.Context, p *DeleteAgentParams) (*DeleteAgentResult, error) {
	return call[DeleteAgentResult](ctx, c, MethodAgentDelete, p)
}

// TrustAgent calls the "agent.trust" method.
func (c *Client) TrustAgent(ctx context.Context, p *TrustAgentParams) (*TrustAgentResult, error) {
	return call[TrustAgentResult](ctx, c, MethodAgentTrust, p)
}

// CleanupAgents calls the "agent.cleanup" method.
func (c *Client) CleanupAgents(ctx context.Context, p *CleanupAgentsParams) (*CleanupAgentsResult, error) {
	return call[CleanupAgentsResult](ctx, c, MethodAgentCleanup, p)
}

// StartSession calls the "session.start" method.
func (c *Client) StartSession(ctx context.Context, p *StartSessionParams) (*StartSessionResult, error) {
	return call[StartSessionResult](ctx, c, MethodSessionStart, p)
}

// EndSession calls the "session.end" method.
func (c *Client) EndSession(ctx context.Context, p *EndSessionParams) (*EndSessionResult, error) {
	return call[EndSessionResult](ctx, c, MethodSessionEnd, p)
}

// Heartbeat calls the "session.heartbeat" method.
func (c *Client) Heartbeat(ctx context.Context, p *HeartbeatParams) (*HeartbeatResult, error) {
	return call[HeartbeatResult](ctx, c, MethodSessionHeartbeat, p)
}

// SetIntent calls the "session.setIntent" method.
func (c *Client) SetIntent(ctx context.Context, p *SetIntentParams) (*SetIntentResult, error) {
	return call[SetIntentResult](ctx, c, MethodSessionSetIntent, p)
}

// SetTask calls the "session.setTask" method.
func (c *Client) SetTask(ctx context.Context, p *SetTaskParams) (*SetTaskResult, error) {
	return call[SetTaskResult](ctx, c, MethodSessionSetTask, p)
}

// ListSessions calls the "session.list" method.
func (c *Client) ListSessions(ctx context.Context, p *ListSessionsParams) (*ListSessionsResult, error) {
	return call[ListSessionsResult](ctx, c, MethodSessionList, p)
}

// SendMessage calls the "message.send" method.
func (c *Client) SendMessage(ctx context.Context, p *SendMessageParams) (*SendMessageResult, error) {
	return call[SendMessageResult](ctx, c, MethodMessageSend, p)
}

// GetMessage calls the "message.get" method.
func (c *Client) GetMessage(ctx context.Context, p *GetMessageParams) (*GetMessageResult, error) {
	return call[GetMessageResult](ctx, c, MethodMessageGet, p)
}

// ListMessages calls the "message.list" method.
func (c *Client) ListMessages(ctx context.Context, p *ListMessagesParams) (*ListMessagesResult, error) {
	return call[ListMessagesResult](ctx, c, MethodMessageList, p)
}

// SearchMessages calls the "message.search" method.
func (c *Client) SearchMessages(ctx context.Context, p *SearchMessagesParams) (*SearchMessagesResult, error) {
	return call[SearchMessagesResult](ctx, c, MethodMessageSearch, p)
}

// EditMessage calls the "message.edit" method.
func (c *Client) EditMessage(ctx context.Context, p *EditMessageParams) (*EditMessageResult, error) {
	return call[EditMessageResult](ctx, c, MethodMessageEdit, p)
}

// DeleteMessage calls the "message.delete" method.
func (c *Client) DeleteMessage(ctx context.Context, p *DeleteMessageParams) (*DeleteMessageResult, error) {
	return call[DeleteMessageResult](ctx, c, MethodMessageDelete, p)
}

// MarkRead calls the "message.markRead" method.
func (c *Client) MarkRead(ctx context.Context, p *MarkReadParams) (*MarkReadResult, error) {
	return call[MarkReadResult](ctx, c, MethodMessageMarkRead, p)
}

// ClaimNext calls the "message.claimNext" method.
func (c *Client) ClaimNext(ctx context.Context, p *ClaimNextParams) (*ClaimNextResult, error) {
	return call[ClaimNextResult](ctx, c, MethodMessageClaimNext, p)
}

// AckMessage calls the "message.ack" method.
func (c *Client) AckMessage(ctx context.Context, p *AckMessageParams) (*AckMessageResult, error) {
	return call[AckMessageResult](ctx, c, MethodMessageAck, p)
}

// ListSent calls the "message.listSent" method.
func (c *Client) ListSent(ctx context.Context, p *ListSentParams) (*ListSentResult, error) {
	return call[ListSentResult](ctx, c, MethodMessageListSent, p)
}

// CreateThread calls the "thread.create" method.
func (c *Client) CreateThread(ctx context.Context, p *CreateThreadParams) (*CreateThreadResult, error) {
	return call[CreateThreadResult](ctx, c, MethodThreadCreate, p)
}

// ListThreads calls the "thread.list" method.
func (c *Client) ListThreads(ctx context.Context, p *ListThreadsParams) (*ListThreadsResult, error) {
	return call[ListThreadsResult](ctx, c, MethodThreadList, p)
}

// GetThread calls the "thread.get" method.
func (c *Client) GetThread(ctx context.Context, p *GetThreadParams) (*GetThreadResult, error) {
	return call[GetThreadResult](ctx, c, MethodThreadGet, p)
}

// Subscribe calls the "subscribe" method.
func (c *Client) Subscribe(ctx context.Context, p *SubscribeParams) (*SubscribeResult, error) {
	return call[SubscribeResult](ctx, c, MethodSubscribe, p)
}

// Unsubscribe calls the "unsubscribe" method.
func (c *Client) Unsubscribe(ctx context.Context, p *UnsubscribeParams) (*UnsubscribeResult, error) {
	return call[UnsubscribeResult](ctx, c, MethodUnsubscribe, p)
}

// ListSubscriptions calls the "subscriptions.list" method.
func (c *Client) ListSubscriptions(ctx context.Context, p *ListSubscriptionsParams) (*ListSubscriptionsResult, error) {
	return call[ListSubscriptionsResult](ctx, c, MethodSubscriptionsList, p)
}

// RegisterUser calls the "user.register" method.
func (c *Client) RegisterUser(ctx context.Context, p *RegisterUserParams) (*RegisterUserResult, error) {
	return call[RegisterUserResult](ctx, c, MethodUserRegister, p)
}

// IdentifyUser calls the "user.identify" method.
func (c *Client) IdentifyUser(ctx context.Context, p *IdentifyUserParams) (*IdentifyUserResult, error) {
	return call[IdentifyUserResult](ctx, c, MethodUserIdentify, p)
}

// CreateGroup calls the "group.create" method.
func (c *Client) CreateGroup(ctx context.Context, p *CreateGroupParams) (*CreateGroupResult, error) {
	return call[CreateGroupResult](ctx, c, MethodGroupCreate, p)
}

// DeleteGroup calls the "group.delete" method.
func (c *Client) DeleteGroup(ctx context.Context, p *DeleteGroupParams) (*DeleteGroupResult, error) {
	return call[DeleteGroupResult](ctx, c, MethodGroupDelete, p)
}

// AddGroupMember calls the "group.member.add" method.
func (c *Client) AddGroupMember(ctx context.Context, p *GroupMembership) (*GroupMembership, error) {
	return call[GroupMembership](ctx, c, MethodGroupMemberAdd, p)
}

// RemoveGroupMember calls the "group.member.remove" method.
func (c *Client) RemoveGroupMember(ctx context.Context, p *GroupMembership) (*GroupMembership, error) {
	return call[GroupMembership](ctx, c, MethodGroupMemberRemove, p)
}

// ListGroups calls the "group.list" method.
func (c *Client) ListGroups(ctx context.Context, p *ListGroupsParams) (*ListGroupsResult, error) {
	return call[ListGroupsResult](ctx, c, MethodGroupList, p)
}

// GroupInfo calls the "group.info" method.
func (c *Client) GroupInfo(ctx context.Context, p *GroupInfoParams) (*GroupInfoResult, error) {
	return call[GroupInfoResult](ctx, c, MethodGroupInfo, p)
}

// GroupMembers calls the "group.members" method.
func (c *Client) GroupMembers(ctx context.Context, p *GroupMembersParams) (*GroupMembersResult, error) {
	return call[GroupMembersResult](ctx, c, MethodGroupMembers, p)
}

// SyncStatus calls the "sync.status" method.
func (c *Client) SyncStatus(ctx context.Context, p *SyncStatusParams) (*SyncStatusResult, error) {
	return call[SyncStatusResult](ctx, c, MethodSyncStatus, p)
}

// SyncForce calls the "sync.force" method.
func (c *Client) SyncForce(ctx context.Context, p *SyncForceParams) (*SyncForceResult, error) {
	return call[SyncForceResult](ctx, c, MethodSyncForce, p)
}

// WebLogin calls the "web.login" method.
func (c *Client) WebLogin(ctx context.Context, p *WebLoginParams) (*WebLoginResult, error) {
	return call[WebLoginResult](ctx, c, MethodWebLogin, p)
}

// KeyStatus calls the "key.status" method.
func (c *Client) KeyStatus(ctx context.Context, p *KeyStatusParams) (*KeyStatus, error) {
	return call[KeyStatus](ctx, c, MethodKeyStatus, p)
}

// NewKey calls the "key.new" method.
func (c *Client) NewKey(ctx context.Context, p *KeyNewParams) (*KeyNewResult, error) {
	return call[KeyNewResult](ctx, c, MethodKeyNew, p)
}

// ExportKeys calls the "key.export" method.
func (c *Client) ExportKeys(ctx context.Context, p *KeyExportParams) (*KeyExportResult, error) {
	return call[KeyExportResult](ctx, c, MethodKeyExport, p)
}

// ImportKeys calls the "key.import" method.
func (c *Client) ImportKeys(ctx context.Context, p *KeyImportParams) (*KeyImportResult, error) {
	return call[KeyImportResult](ctx, c, MethodKeyImport, p)
}

// GrantKeys calls the "key.grant" method.
func (c *Client) GrantKeys(ctx context.Context, p *KeyGrantParams) (*KeyGrantResult, error) {
	return call[KeyGrantResult](ctx, c, MethodKeyGrant, p)
}

// AcceptKeys calls the "key.accept" method.
func (c *Client) AcceptKeys(ctx context.Context, p *KeyAcceptParams) (*KeyImportResult, error) {
	return call[KeyImportResult](ctx, c, MethodKeyAccept, p)
}
